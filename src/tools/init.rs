//! `slack-once init NAME`: writes a new bot crate that builds, tests and deploys on its own,
//! from the template in `templates/bot/` (embedded in the binary). The same folder serves
//! `cargo lambda new NAME --template PATH/templates/bot` (it carries a `CargoLambda.toml`):
//! both render `{{ project_name }}` and `{{ slack_once }}` (how the bot depends on slack-once).
//!
//! The generated `template.yaml` is this repository's, with the bot's name for the binary, the
//! secret's default name, the log groups and the dashboard (a test keeps the two in step).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::args::{Args, Item, Spec};

/// `init NAME [--dir DIR] [--path CHECKOUT] [--git URL] [--version V]`.
pub static SPEC: Spec = Spec {
    name: "init",
    about: "write a new bot crate NAME into DIR (default ./NAME), depending on\n\
            slack-once by path (default: this checkout, when it is one), git or version",
    operands: &[Item {
        name: "NAME",
        help: "the bot's name: its crate, binary, stack and slash command /NAME",
    }],
    options: &[
        Item {
            name: "--dir DIR",
            help: "where to write it (default ./NAME); must not exist, or be empty",
        },
        Item {
            name: "--path CHECKOUT",
            help: "depend on slack-once at this checkout",
        },
        Item {
            name: "--git URL",
            help: "depend on slack-once from this git repository",
        },
        Item {
            name: "--version V",
            help: "depend on slack-once V from crates.io",
        },
    ],
    env: &[],
};

/// The usage lines of `slack-once init`, as the binary's usage lists them.
pub fn usage_lines() -> String {
    super::overview(&SPEC, "slack-once")
}

/// The template's files: (path in the new crate, text, executable).
const FILES: &[(&str, &str, bool)] = &[
    // Named so that cargo does not take the template for a package (see CargoLambda.toml).
    (
        "Cargo.toml",
        include_str!("../../templates/bot/{{'Cargo.toml'}}"),
        false,
    ),
    (
        "src/main.rs",
        include_str!("../../templates/bot/src/main.rs"),
        false,
    ),
    (
        "src/tests.rs",
        include_str!("../../templates/bot/src/tests.rs"),
        false,
    ),
    (
        "template.yaml",
        include_str!("../../templates/bot/template.yaml"),
        false,
    ),
    (
        "samconfig.toml",
        include_str!("../../templates/bot/samconfig.toml"),
        false,
    ),
    (
        "slack-app-manifest.json",
        include_str!("../../templates/bot/slack-app-manifest.json"),
        false,
    ),
    (
        "events/app_mention.json",
        include_str!("../../templates/bot/events/app_mention.json"),
        false,
    ),
    (
        "events/command.form",
        include_str!("../../templates/bot/events/command.form"),
        false,
    ),
    (".ci/run", include_str!("../../templates/bot/.ci/run"), true),
    (
        ".gitignore",
        include_str!("../../templates/bot/.gitignore"),
        false,
    ),
    (
        "README.md",
        include_str!("../../templates/bot/README.md"),
        false,
    ),
];

/// How the new bot depends on slack-once: the inside of a TOML inline table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dependency {
    /// `path = "…"`: a checkout on this machine.
    Path(PathBuf),
    /// `git = "…"`.
    Git(String),
    /// `version = "…"`: from crates.io.
    Version(String),
}

/// Whether this release is on crates.io: until it is, a bot depends on a checkout or on git,
/// since `version = "…"` would not resolve.
pub const PUBLISHED: bool = false;

impl Dependency {
    /// This checkout when the binary was built from one that is still there, else this
    /// release from crates.io once it is published there ([`PUBLISHED`]); `None` when neither
    /// (a binary installed from git before then): the user names the dependency.
    pub fn default_for_this_build() -> Option<Self> {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        // Not a crate Cargo unpacked (`cargo install slack-once`, a git dependency): its
        // cache is no place to depend on, and is cleaned up.
        let in_cargo_cache = here
            .components()
            .any(|c| c.as_os_str() == "registry" || c.as_os_str() == "git")
            && here.components().any(|c| c.as_os_str() == ".cargo")
            || here.join(".cargo_vcs_info.json").exists();
        let is_checkout = !in_cargo_cache
            && std::fs::read_to_string(here.join("Cargo.toml"))
                .is_ok_and(|toml| toml.contains("name = \"slack-once\""))
            && here.join("templates/bot").is_dir();
        if is_checkout {
            Some(Self::Path(here.to_path_buf()))
        } else if PUBLISHED {
            Some(Self::Version(env!("CARGO_PKG_VERSION").to_string()))
        } else {
            None
        }
    }

    fn toml(&self) -> String {
        let quoted = |s: &str| serde_json::Value::String(s.to_string()).to_string();
        match self {
            Self::Path(path) => format!("path = {}", quoted(&path.to_string_lossy())),
            Self::Git(url) => format!("git = {}", quoted(url)),
            Self::Version(version) => format!("version = {}", quoted(version)),
        }
    }
}

/// Why a bot cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// The name given is not one [`valid_name`] accepts.
    #[error(
        "{0:?} is not a bot name: lowercase letters, digits and '-', starting with a letter, at most 31 (it is also the stack's name and the slash command /NAME), and none of cargo's reserved names or slack-once"
    )]
    Name(String),
    /// The directory exists and holds something.
    #[error("{0} exists and is not empty: choose another NAME or --dir")]
    Exists(PathBuf),
    /// A file or directory could not be written: its path and the I/O error.
    #[error("cannot write {0}: {1}")]
    Write(PathBuf, std::io::Error),
}

/// Whether `name` can name a crate, a binary, a CloudFormation stack (letters, digits and
/// `-`) and a slash command (at most 32 characters with its `/`).
pub fn valid_name(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "build",
        "deps",
        "examples",
        "incremental",
        "test",
        "bench",
        "slack-once",
        "slack_once",
    ];
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 31
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
        && !RESERVED.contains(&name)
}

/// The template's files rendered for `name`: (path, text, executable).
pub fn render(name: &str, dependency: &Dependency) -> Vec<(&'static str, String, bool)> {
    let slack_once = dependency.toml();
    FILES
        .iter()
        .map(|(path, text, executable)| {
            let text = text
                .replace("{{ project_name }}", name)
                .replace("{{ slack_once }}", &slack_once);
            (*path, text, *executable)
        })
        .collect()
}

/// Writes the bot `name` into `dir` (which must not exist, or be empty); the files written.
pub fn write(dir: &Path, name: &str, dependency: &Dependency) -> Result<Vec<PathBuf>, InitError> {
    if !valid_name(name) {
        return Err(InitError::Name(name.to_string()));
    }
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(InitError::Exists(dir.to_path_buf()));
    }
    let mut written = Vec::new();
    for (path, text, executable) in render(name, dependency) {
        let file = dir.join(path);
        let io = |e| InitError::Write(file.clone(), e);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        std::fs::write(&file, text).map_err(io)?;
        #[cfg(unix)]
        if executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        }
        written.push(file);
    }
    Ok(written)
}

/// Runs `slack-once init` with its arguments (after `init`).
pub fn run(args: &[String]) -> ExitCode {
    super::run_tool(&SPEC, init, args)
}

fn init(args: &Args) -> ExitCode {
    let name = args.operand(0).unwrap_or_default().to_string();
    let dir = args.value("--dir").map(PathBuf::from);
    let chosen = [
        args.value("--path")
            .map(|v| Dependency::Path(absolute(Path::new(v)))),
        args.value("--git").map(|v| Dependency::Git(v.to_string())),
        args.value("--version")
            .map(|v| Dependency::Version(v.to_string())),
    ];
    if chosen.iter().flatten().count() > 1 {
        return args.fail("give one of --path, --git and --version");
    }
    let dependency = chosen.into_iter().flatten().next();
    let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
    let Some(dependency) = dependency.or_else(Dependency::default_for_this_build) else {
        return args.fail(
            "this slack-once was not built from a checkout, and is not on crates.io yet: pass \
             --path CHECKOUT (a clone of its repository) or --git URL",
        );
    };
    match write(&dir, &name, &dependency) {
        Ok(files) => {
            say!(
                "wrote the bot {name} in {} ({} files; slack-once = {{ {} }})",
                dir.display(),
                files.len(),
                dependency.toml()
            );
            say!(
                "next: cd {} && SLACK_SIGNING_SECRET=dev-secret cargo run   (and cargo test)",
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(error @ InitError::Write(..)) => args.failed(&error.to_string()),
        Err(error) => args.fail(&error.to_string()),
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// This repository's `template.yaml` made the template of a bot named `{{ project_name }}`.
#[doc(hidden)]
pub fn bot_template_yaml(ours: &str) -> String {
    ours.replace("Binary: slack-once", "Binary: {{ project_name }}")
        .replace(
            "Default: slack-once/slack",
            "Default: {{ project_name }}/slack",
        )
        .replace("}-slack-once", "}-{{ project_name }}")
        .replace(
            "  slack-once: a Slack Events API bot",
            "  {{ project_name }} (built on slack-once): a Slack Events API bot",
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bot's README names every tool its binary's `--help` lists.
    #[test]
    fn the_bot_readme_names_every_tool_of_the_usage() {
        let readme = include_str!("../../templates/bot/README.md");
        let usage = crate::run::usage();
        let program = crate::tools::program();
        let tools: Vec<&str> = usage
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix(program.as_str()))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter(|tool| !tool.starts_with('-'))
            .collect();
        assert!(tools.contains(&"sign"), "{usage}");
        for tool in tools {
            assert!(
                readme.contains(&format!("`{tool}`")),
                "templates/bot/README.md does not name `{tool}`"
            );
        }
    }

    /// The bot's template.yaml is ours with its name: regenerate it with
    /// `SLACK_ONCE_BLESS=1 cargo test --lib init` after changing template.yaml.
    #[test]
    fn the_bot_template_is_ours_with_its_name() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let ours = std::fs::read_to_string(root.join("template.yaml")).unwrap();
        let expected = bot_template_yaml(&ours);
        let path = root.join("templates/bot/template.yaml");
        if std::env::var_os("SLACK_ONCE_BLESS").is_some() {
            std::fs::write(&path, &expected).unwrap();
        }
        let theirs = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            theirs == expected,
            "templates/bot/template.yaml is not template.yaml with the bot's name: run \
             SLACK_ONCE_BLESS=1 cargo test --lib init"
        );
        assert!(!expected.contains("Binary: slack-once"));
    }

    #[test]
    fn names_are_checked_and_everything_is_rendered() {
        assert!(valid_name("mybot") && valid_name("my-bot-2") && valid_name(&"a".repeat(31)));
        for bad in [
            "",
            "MyBot",
            "2bot",
            "my bot",
            "../x",
            "my_bot",
            "deps",
            "slack-once",
            "b-",
            &"a".repeat(32),
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        let files = render("pollster", &Dependency::Path("/src/slack once".into()));
        for (path, text, _) in &files {
            assert!(!text.contains("{{"), "{path} keeps a placeholder");
        }
        let cargo = &files.iter().find(|f| f.0 == "Cargo.toml").unwrap().1;
        assert!(cargo.contains("name = \"pollster\""));
        assert!(cargo.contains("slack-once = { path = \"/src/slack once\" }"));
        let manifest = &files
            .iter()
            .find(|f| f.0 == "slack-app-manifest.json")
            .unwrap()
            .1;
        let manifest: serde_json::Value = serde_json::from_str(manifest).unwrap();
        assert_eq!(manifest["display_information"]["name"], "pollster");
        assert_eq!(
            manifest["features"]["slash_commands"][0]["command"],
            "/pollster"
        );
    }

    #[test]
    fn a_directory_in_use_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("slack-once-init-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine").unwrap();
        let dependency = Dependency::Version("0.1".into());
        assert!(matches!(
            write(&dir, "mybot", &dependency),
            Err(InitError::Exists(_))
        ));
        assert!(matches!(
            write(&dir, "My Bot", &dependency),
            Err(InitError::Name(_))
        ));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let fresh = dir.join("mybot");
        let files = write(&fresh, "mybot", &dependency).unwrap();
        assert_eq!(files.len(), FILES.len());
        assert!(fresh.join(".ci/run").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
