//! The tools' one argument parser: each tool declares a [`Spec`] (its operands, its options and
//! the environment it reads), and the same parser reads every tool's arguments, answers
//! `--help` with the usage made from the spec (one option a line, exit 0), and refuses what the
//! spec does not name with the usage on stderr (exit 2).

use std::process::ExitCode;
use std::str::FromStr;

/// One operand, option or variable of a tool, with what it is for.
#[derive(Clone, Copy, Debug)]
pub struct Item {
    /// As the usage shows it: `FILE`, `[TABLE]` (optional), `--dry-run` (a flag), `--max N` (an
    /// option with a value), `DEDUP_TABLE` (a variable).
    pub name: &'static str,
    /// What it does, on one line.
    pub help: &'static str,
}

/// What a tool takes.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The tool's name: the first argument (`redrive`).
    pub name: &'static str,
    /// What it does, in a line or two (`\n` between them).
    pub about: &'static str,
    /// Its operands, in order; a name in brackets is optional.
    pub operands: &'static [Item],
    /// Its options.
    pub options: &'static [Item],
    /// The environment variables it reads.
    pub env: &'static [Item],
}

/// A tool's arguments as read.
#[derive(Debug)]
pub struct Args {
    spec: &'static Spec,
    given: Vec<(&'static str, Option<String>)>,
    operands: Vec<String>,
}

/// The option's flag: `--max` of `--max N`.
fn flag_of(name: &'static str) -> &'static str {
    name.split(' ').next().unwrap_or(name)
}

fn takes_value(name: &str) -> bool {
    name.contains(' ')
}

impl Spec {
    /// `redrive [--dry-run] [--max N]`.
    pub fn synopsis(&self) -> String {
        let mut parts = vec![self.name.to_string()];
        parts.extend(self.options.iter().map(|o| format!("[{}]", o.name)));
        parts.extend(self.operands.iter().map(|o| o.name.to_string()));
        parts.join(" ")
    }

    /// The tool's usage, for `--help`: the synopsis, what it does, one line per operand,
    /// option and variable.
    pub fn usage(&self, program: &str) -> String {
        let mut text = format!("usage: {program} {}\n\n", self.synopsis());
        for line in self.about.lines() {
            text.push_str(&format!("{}\n", line.trim()));
        }
        let width = self
            .operands
            .iter()
            .chain(self.options)
            .chain(self.env)
            .map(|i| i.name.len())
            .max()
            .unwrap_or(0);
        for (title, items) in [
            ("operands", self.operands),
            ("options", self.options),
            ("environment", self.env),
        ] {
            if items.is_empty() {
                continue;
            }
            text.push_str(&format!("\n{title}:\n"));
            for item in items {
                text.push_str(&format!("  {:<width$}  {}\n", item.name, item.help));
            }
        }
        text.trim_end().to_string()
    }

    /// Reads `args` (those after the tool's name). `Err` with the exit code once the parser
    /// has said why: 0 after `--help` (the usage printed), 2 for arguments the spec does not
    /// take (the reason and the usage on stderr).
    pub fn parse(&'static self, args: &[String]) -> Result<Args, ExitCode> {
        let program = super::program();
        let refuse = |why: String| {
            eprintln!("{program} {}: {why}\n\n{}", self.name, self.usage(&program));
            ExitCode::from(2)
        };
        let mut parsed = Args {
            spec: self,
            given: Vec::new(),
            operands: Vec::new(),
        };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            if arg == "-h" || arg == "--help" {
                say!("{}", self.usage(&program));
                return Err(ExitCode::SUCCESS);
            }
            if arg.starts_with("--") {
                let (flag, inline) = match arg.split_once('=') {
                    Some((f, v)) => (f, Some(v.to_string())),
                    None => (arg.as_str(), None),
                };
                let Some(option) = self.options.iter().find(|o| flag_of(o.name) == flag) else {
                    return Err(refuse(format!("unknown option {flag:?}")));
                };
                let value = match (takes_value(option.name), inline) {
                    (true, Some(v)) => Some(v),
                    (true, None) => match rest.next() {
                        Some(v) => Some(v.clone()),
                        None => return Err(refuse(format!("{} takes a value", option.name))),
                    },
                    (false, Some(_)) => {
                        return Err(refuse(format!("{flag} takes no value")));
                    }
                    (false, None) => None,
                };
                parsed.given.push((flag_of(option.name), value));
                continue;
            }
            if parsed.operands.len() >= self.operands.len() {
                return Err(refuse(format!("unexpected argument {arg:?}")));
            }
            parsed.operands.push(arg.clone());
        }
        let required = self
            .operands
            .iter()
            .filter(|o| !o.name.starts_with('['))
            .count();
        if parsed.operands.len() < required {
            let missing = &self.operands[parsed.operands.len()];
            return Err(refuse(format!(
                "{} is missing: {}",
                missing.name, missing.help
            )));
        }
        Ok(parsed)
    }
}

impl Args {
    /// Whether the flag `name` (`--dry-run`) was given.
    pub fn flag(&self, name: &str) -> bool {
        self.given.iter().any(|(f, _)| *f == name)
    }

    /// The value of the option `name` (`--max`), the last one given.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.given
            .iter()
            .rev()
            .find(|(f, _)| *f == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Every value of the option `name` (`--seed`), in the order given.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.given
            .iter()
            .filter(|(f, _)| *f == name)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }

    /// The value of `name` read as a `T`, if given; a value that does not read is refused
    /// (`what`: what it must be) with exit code 2.
    pub fn parsed<T: FromStr>(&self, name: &str, what: &str) -> Result<Option<T>, ExitCode> {
        match self.value(name) {
            None => Ok(None),
            Some(text) => text
                .parse()
                .map(Some)
                .map_err(|_| self.fail(&format!("{name} takes {what}, not {text:?}"))),
        }
    }

    /// The operand at `index`, if given.
    pub fn operand(&self, index: usize) -> Option<&str> {
        self.operands.get(index).map(String::as_str)
    }

    /// Says why the tool cannot run (`PROGRAM TOOL: why`) on stderr: exit code 2.
    pub fn fail(&self, why: &str) -> ExitCode {
        let program = super::program();
        eprintln!(
            "{program} {}: {why}\n(`{program} {} --help` says what it takes)",
            self.spec.name, self.spec.name
        );
        ExitCode::from(2)
    }

    /// Says what failed while the tool ran: exit code 1.
    pub fn failed(&self, what: &str) -> ExitCode {
        eprintln!("{} {}: {what}", super::program(), self.spec.name);
        ExitCode::FAILURE
    }
}

/// A variable of the environment, unless unset or empty.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    static SPEC: Spec = Spec {
        name: "demo",
        about: "does a demo",
        operands: &[
            Item {
                name: "FILE",
                help: "the file",
            },
            Item {
                name: "[MORE]",
                help: "another",
            },
        ],
        options: &[
            Item {
                name: "--dry-run",
                help: "change nothing",
            },
            Item {
                name: "--max N",
                help: "at most N",
            },
        ],
        env: &[Item {
            name: "DEDUP_TABLE",
            help: "the table",
        }],
    };

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_flags_and_operands_are_read_in_any_order() {
        let a = SPEC
            .parse(&args(&["--max", "3", "f.json", "--dry-run"]))
            .unwrap();
        assert!(a.flag("--dry-run"));
        assert_eq!(a.parsed::<u32>("--max", "a number").unwrap(), Some(3));
        assert_eq!(a.operand(0), Some("f.json"));
        assert_eq!(a.operand(1), None);
        let b = SPEC.parse(&args(&["f", "--max=7"])).unwrap();
        assert_eq!(b.value("--max"), Some("7"));
        assert!(!b.flag("--dry-run"));
    }

    #[test]
    fn what_the_spec_does_not_take_is_refused_with_exit_2() {
        for bad in [
            &["f", "--nope"][..],
            &["--max"],
            &["f", "g", "h"],
            &[],
            &["f", "--dry-run=yes"],
        ] {
            assert_eq!(
                SPEC.parse(&args(bad)).unwrap_err(),
                ExitCode::from(2),
                "{bad:?}"
            );
        }
        assert_eq!(
            SPEC.parse(&args(&["--help"])).unwrap_err(),
            ExitCode::SUCCESS
        );
    }

    #[test]
    fn the_usage_has_one_line_per_option() {
        let usage = SPEC.usage("bot");
        assert!(usage.starts_with("usage: bot demo [--dry-run] [--max N] FILE [MORE]\n"));
        for line in [
            "  --dry-run    change nothing",
            "  --max N      at most N",
            "  DEDUP_TABLE  the table",
        ] {
            assert!(usage.lines().any(|l| l == line), "{line:?} in\n{usage}");
        }
    }
}
