//! Test helpers: a private DynamoDB Local.

use super::*;

/// A DynamoDB Local of the test's own, on a free port with its data on disk, so the test can
/// stop and restart it. Stopped (by PID) when dropped.
pub struct PrivateDynamoDb {
    pub port: u16,
    data: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl PrivateDynamoDb {
    pub fn start() -> Self {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let data =
            std::env::temp_dir().join(format!("slack-once-ddb-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&data).unwrap();
        let mut db = Self {
            port,
            data,
            child: None,
        };
        db.restart();
        db
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        let dir = std::env::var("DYNAMODB_LOCAL_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|_| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".dynamodb-local")
            })
            .join("package/emulator");
        let jar = dir.join("DynamoDBLocal.jar");
        assert!(
            jar.exists(),
            "DynamoDB Local is not installed at {}: run `scripts/dynamodb-local.sh install`",
            jar.display()
        );
        let child = std::process::Command::new("java")
            .arg(format!(
                "-Djava.library.path={}",
                dir.join("DynamoDBLocal_lib").display()
            ))
            .arg("-jar")
            .arg(&jar)
            .args(["-sharedDb", "-disableTelemetry", "-dbPath"])
            .arg(&self.data)
            .args(["-port", &self.port.to_string()])
            .current_dir(&self.data)
            .env("DDB_LOCAL_TELEMETRY", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java starts DynamoDB Local");
        self.child = Some(child);
        // The port opens before the JVM serves requests briskly: ready once a few requests in
        // a row are answered, so the bots' first ledger writes do not meet a cold start.
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut answered_in_a_row = 0;
        while answered_in_a_row < 3 {
            assert!(
                std::time::Instant::now() < deadline,
                "DynamoDB Local did not start on {addr}"
            );
            if dynamodb_answers(addr) {
                answered_in_a_row += 1;
            } else {
                answered_in_a_row = 0;
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Whether DynamoDB Local at `addr` answers a ListTables request within a second (any HTTP
/// answer will do: DynamoDB Local does not check signatures).
fn dynamodb_answers(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let body = "{}";
    let request = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-amz-json-1.0\r\n\
         X-Amz-Target: DynamoDB_20120810.ListTables\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 ")
}

impl Drop for PrivateDynamoDb {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
