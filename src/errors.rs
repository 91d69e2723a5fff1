//! An error with its causes on one line: what the logs and the tools' messages print (never a
//! secret: no error of this crate carries one).

/// An error and all its sources on one line, for the log.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
