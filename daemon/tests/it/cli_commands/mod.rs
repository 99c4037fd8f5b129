//! The CLI's leaf commands (`daemon restart`, `status`, …), for the tests that keep
//! the docs listing every one of them (operations_doc.rs, readme_api.rs). Hidden
//! commands (`log-relay`, which the daemon runs) are not for people: left out.

pub fn leaves() -> Vec<(String, clap::Command)> {
    fn walk(cmd: &clap::Command, prefix: &str, out: &mut Vec<(String, clap::Command)>) {
        for sub in cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        {
            let path = format!("{prefix}{}", sub.get_name());
            if sub.has_subcommands() {
                walk(sub, &format!("{path} "), out);
            } else {
                out.push((path, sub.clone()));
            }
        }
    }
    let mut all = Vec::new();
    walk(
        &<lavenderd::cli::Cli as clap::CommandFactory>::command(),
        "",
        &mut all,
    );
    all
}
