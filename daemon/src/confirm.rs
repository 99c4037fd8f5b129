//! Asking before what cannot be undone (`prune`, `service uninstall`, `start --fresh`
//! over a run that could be resumed): on a terminal the command says what it is about
//! to do and waits for `y`; without one (a script, an agent, a pipe) it needs `--yes`,
//! and without it stops with one line, having changed nothing.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Result, bail};

/// Goes ahead when `yes`, or when a person at the terminal answers `y`/`yes` to
/// `what` (a phrase after "This will": "delete 2 old run(s) …").
pub fn confirm(what: &str, yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!(
            "this would {what}; there is no terminal to ask for confirmation, so pass --yes (nothing was changed)"
        );
    }
    let mut err = std::io::stderr();
    write!(err, "This will {what}.\nContinue? [y/N] ")?;
    err.flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if !is_yes(&answer) {
        bail!("not confirmed: nothing was changed");
    }
    Ok(())
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_y_or_yes_confirms() {
        for yes in ["y", "Y\n", " yes \n", "YES"] {
            assert!(super::is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n", "no", "yess", "sure"] {
            assert!(!super::is_yes(no), "{no:?}");
        }
    }
}
