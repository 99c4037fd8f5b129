use std::path::{Path, PathBuf};

use super::*;

/// An environment with a home folder and nothing else.
fn env_at(home: &Path) -> DataRootEnv {
    DataRootEnv {
        home: Some(home.to_path_buf()),
        ..DataRootEnv::default()
    }
}

fn sources<'a>(cwd: &'a Path, env: &'a DataRootEnv, candidates: &'a [PathBuf]) -> Sources<'a> {
    Sources {
        flag: None,
        config: None,
        candidates,
        cwd,
        env,
    }
}

/// Makes `dir` hold a data root: a run directory under `checkpoints/`.
fn make_data_root(dir: &Path) {
    std::fs::create_dir_all(dir.join("checkpoints/run-2026-01-01_00-00-00")).unwrap();
}

#[test]
fn order_flag_env_config_candidates_found_default() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let cwd = tmp.path().join("project/sub");
    std::fs::create_dir_all(&cwd).unwrap();
    let mut env = env_at(&home);
    let none: Vec<PathBuf> = Vec::new();

    // Nothing named, no data-root/ folder: the per-user default.
    let r = resolve(&sources(&cwd, &env, &none));
    assert_eq!(r.path, home.join(".local/share/lavender"));
    assert_eq!(
        r.choice,
        Choice::Default {
            folder: Some("~/.local/share/lavender")
        }
    );
    env.xdg_data_home = Some(tmp.path().join("xdg"));
    assert_eq!(
        resolve(&sources(&cwd, &env, &none)).path,
        tmp.path().join("xdg/lavender")
    );
    env.xdg_data_home = None;
    env.macos = true;
    assert_eq!(
        resolve(&sources(&cwd, &env, &none)).path,
        home.join("Library/Application Support/lavender")
    );
    env.macos = false;
    // No home at all: ./data-root.
    let bare = DataRootEnv::default();
    let r = resolve(&sources(&cwd, &bare, &none));
    assert_eq!(r.path, cwd.join("data-root"));
    assert_eq!(r.choice, Choice::Default { folder: None });

    // A data-root/ folder above the current folder, then one in it: the nearest wins.
    std::fs::create_dir_all(tmp.path().join("project/data-root")).unwrap();
    let r = resolve(&sources(&cwd, &env, &none));
    assert_eq!(r.path, tmp.path().join("project/data-root"));
    assert_eq!(r.choice, Choice::Found { here: false });
    std::fs::create_dir_all(cwd.join("data-root")).unwrap();
    let r = resolve(&sources(&cwd, &env, &none));
    assert_eq!(r.path, cwd.join("data-root"));
    assert_eq!(r.choice, Choice::Found { here: true });

    // An existing candidate beats the found folder; a missing one is named.
    let ssd = tmp.path().join("ssd");
    std::fs::create_dir_all(&ssd).unwrap();
    let candidates = vec![tmp.path().join("unplugged"), ssd.clone()];
    let r = resolve(&sources(&cwd, &env, &candidates));
    assert_eq!(r.path, ssd);
    assert_eq!(
        r.choice,
        Choice::Candidate {
            index: 1,
            holds: false,
            skipped: vec![tmp.path().join("unplugged")]
        }
    );
    assert!(
        r.line().contains("not there:") && r.line().contains("unplugged"),
        "{}",
        r.line()
    );

    // Config beats candidates, the environment beats the config, the flag beats all;
    // relative paths are from the current folder.
    let mut src = sources(&cwd, &env, &candidates);
    src.config = Some(Path::new("from-config"));
    assert_eq!(resolve(&src).path, cwd.join("from-config"));
    assert_eq!(resolve(&src).choice, Choice::Config);
    let with_env = DataRootEnv {
        data_root: Some(tmp.path().join("from-env")),
        ..env.clone()
    };
    src.env = &with_env;
    assert_eq!(resolve(&src).path, tmp.path().join("from-env"));
    assert_eq!(resolve(&src).choice, Choice::Env);
    src.flag = Some(Path::new("flag"));
    assert_eq!(resolve(&src).path, cwd.join("flag"));
    assert_eq!(resolve(&src).choice, Choice::Flag);
}

#[test]
fn the_first_candidate_holding_a_data_root_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let env = env_at(&tmp.path().join("home"));
    let (empty, a, b) = (
        tmp.path().join("empty"),
        tmp.path().join("a"),
        tmp.path().join("b"),
    );
    for d in [&empty, &a, &b] {
        std::fs::create_dir_all(d).unwrap();
    }
    make_data_root(&a);
    make_data_root(&b);
    let candidates = vec![tmp.path().join("missing"), empty.clone(), a.clone(), b];
    let r = resolve(&sources(tmp.path(), &env, &candidates));
    assert_eq!(r.path, a, "an existing but empty candidate does not win");
    assert_eq!(
        r.choice,
        Choice::Candidate {
            index: 2,
            holds: true,
            skipped: vec![tmp.path().join("missing")]
        }
    );
    assert!(r.elsewhere.is_empty(), "it holds one: no hint");
    // None holds one: the first that exists (a new disk's first start).
    std::fs::remove_dir_all(&a).unwrap();
    let candidates = vec![tmp.path().join("missing"), empty.clone()];
    let r = resolve(&sources(tmp.path(), &env, &candidates));
    assert_eq!(r.path, empty);
    assert!(matches!(r.choice, Choice::Candidate { holds: false, .. }));
}

#[test]
fn an_empty_data_root_names_the_place_that_holds_one_and_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let env = env_at(&home);
    let default = home.join(".local/share/lavender");
    make_data_root(&default);
    let project = tmp.path().join("project");
    std::fs::create_dir_all(project.join("data-root")).unwrap();
    let none: Vec<PathBuf> = Vec::new();
    let r = resolve(&sources(&project, &env, &none));
    assert_eq!(r.path, project.join("data-root"));
    let hint = r.hint().expect("a hint");
    assert!(
        hint.contains(&format!("--data-root {}", default.display())),
        "{hint}"
    );
    assert!(hint.contains("per-user default"), "{hint}");
    let json = r.to_json();
    assert_eq!(json["chosen_by"], "found");
    assert_eq!(json["elsewhere"][0]["chosen_by"], "default");
    // The data root holds one itself: nothing to hint.
    make_data_root(&project.join("data-root"));
    assert_eq!(resolve(&sources(&project, &env, &none)).hint(), None);
}

#[test]
fn holds_data_root_knows_lavender_folders_only() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    assert!(!holds_data_root(d));
    std::fs::create_dir_all(d.join("checkpoints/stage1")).unwrap();
    std::fs::create_dir_all(d.join("logs/other")).unwrap();
    assert!(!holds_data_root(d), "another tool's checkpoints and logs");
    std::fs::write(d.join("logs/pipeline_chunk1_20260101_000000.log"), "").unwrap();
    assert!(holds_data_root(d));
    let e = tmp.path().join("e");
    std::fs::create_dir_all(e.join("state")).unwrap();
    std::fs::write(e.join("state/pipeline.json"), "{}").unwrap();
    assert!(holds_data_root(&e));
}

#[test]
fn identity_notices_a_folder_gone_or_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ssd");
    std::fs::create_dir_all(&root).unwrap();
    let id = Identity::capture(&root, "data_root_candidates[0]".into()).unwrap();
    assert_eq!(id.check(), Ok(()));
    // Made while the root still exists, so it cannot reuse the root's inode.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::remove_dir_all(&root).unwrap();
    let gone = id.check().unwrap_err();
    assert!(matches!(gone, RootGone::Missing { .. }));
    let text = gone.to_string();
    assert!(
        text.contains(&root.display().to_string()) && text.contains("data_root_candidates[0]"),
        "{text}"
    );
    // Another folder at the same path.
    std::fs::rename(&other, &root).unwrap();
    assert!(matches!(id.check(), Err(RootGone::Replaced { .. })));
}

#[test]
fn default_yaml_shows_candidates_that_parse() {
    let example = crate::config::DEFAULT_YAML
        .lines()
        .find_map(|l| {
            l.strip_prefix('#')
                .map(str::trim)
                .filter(|l| l.starts_with("data_root_candidates: ["))
        })
        .expect("configs/default.yaml shows an example of data_root_candidates");
    let config = crate::config::Config::from_yaml_str(example, "the example").unwrap();
    assert_eq!(
        config.data_root_candidates,
        vec![
            PathBuf::from("/Volumes/2TBSSD/lavender"),
            PathBuf::from("/mnt/ssd/lavender")
        ]
    );
}
