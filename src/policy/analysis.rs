//! What one program will do with its arguments, as found by the tool-specific analyzers
//! (`tools`, `wrappers`, `git`, `scripts`): the classifier turns it into findings.

use super::decision::Category;

/// One thing a program will do, as a category with the rule name and reason to show.
#[derive(Debug, Clone)]
pub struct Effect {
    pub category: Category,
    pub rule: &'static str,
    pub reason: String,
}

#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// What the arguments make the program do, beyond what its rule says.
    pub effects: Vec<Effect>,
    /// Programs it starts, as argv (wrappers, `find -exec`, `git bisect run`).
    pub inner: Vec<Vec<String>>,
    /// Shell scripts it runs (`sh -c`, `eval`, `trap`, `env -S`, `git -c alias.x='!...'`).
    pub scripts: Vec<String>,
    /// Code in another language it runs (`python3 -c`, `node -e`, here-documents).
    pub code: Vec<String>,
    /// Files it reads or writes besides its operands (`sed w FILE`, `sort -o FILE`).
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    /// Environment it sets for the program it runs (`env A=b cmd`).
    pub env: Vec<(String, String)>,
    /// Directory it changes to before running `inner`/`scripts` (`env -C`, `git -C`).
    pub chdir: Option<String>,
    /// Argument indexes (into argv) that are not paths: patterns, scripts, messages.
    pub not_paths: Vec<usize>,
    /// Match rules against this argv instead (`python3 -m pip install` is `pip install`);
    /// several: the strictest wins. When no rule knows it, the program's own rule decides.
    pub rule_argv: Vec<Vec<String>>,
    /// The program only runs `inner`/`scripts`: they decide, its own rule does not.
    pub transparent: bool,
}

impl Analysis {
    pub fn effect(&mut self, category: Category, rule: &'static str, reason: impl Into<String>) {
        self.effects.push(Effect {
            category,
            rule,
            reason: reason.into(),
        });
    }

    pub fn transparent() -> Analysis {
        Analysis {
            transparent: true,
            ..Default::default()
        }
    }
}

/// Splits `-xVALUE`/`--name=VALUE` style options: the value attached to `arg` for one of
/// `opts` (short `-x` or long `--name`), or `None`. `Some("")` means "in the next word".
pub fn option_value<'a>(arg: &'a str, short: &[char], long: &[&str]) -> Option<&'a str> {
    if let Some(rest) = arg.strip_prefix("--") {
        for l in long {
            let l = l.trim_start_matches('-');
            if rest == l {
                return Some("");
            }
            if let Some(v) = rest.strip_prefix(l).and_then(|r| r.strip_prefix('=')) {
                return Some(v);
            }
        }
        return None;
    }
    let rest = arg.strip_prefix('-')?;
    let c = rest.chars().next()?;
    if short.contains(&c) {
        return Some(&rest[c.len_utf8()..]);
    }
    None
}
