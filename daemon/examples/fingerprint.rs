//! Times the fingerprint `start` takes of a source folder (`lavender::steps::files`, the
//! function the done-markers use): FILES files of SIZE bytes written into a scratch
//! folder, then PASSES fingerprints of it. Prints one JSON object. Run by
//! `bench/fingerprint/run.sh`.
//!
//!     cargo run --release -p lavenderd --example fingerprint -- [FILES] [SIZE] [PASSES] [DIR]

use std::time::Instant;

use lavender::steps::files;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| {
        args.get(i)
            .map(|a| {
                a.parse::<u64>()
                    .expect("FILES, SIZE and PASSES are numbers")
            })
            .unwrap_or(default)
    };
    let (count, size, passes) = (arg(0, 10_000), arg(1, 2048), arg(2, 5).max(1));
    let scratch = tempfile_dir(args.get(3));
    let corpus = scratch.join("corpus");
    std::fs::create_dir_all(&corpus).expect("create the scratch folder");
    for i in 0..count {
        // Ten sub-folders, as a corpus split by topic or month would be.
        let dir = corpus.join(format!("part{}", i % 10));
        std::fs::create_dir_all(&dir).expect("create a sub-folder");
        let body: Vec<u8> = (0..size)
            .map(|b| b"abcdefgh \n"[((b + i) % 10) as usize])
            .collect();
        std::fs::write(dir.join(format!("doc{i:06}.txt")), body).expect("write a file");
    }
    let mut secs = Vec::new();
    let mut cpu = Vec::new();
    let mut seen = 0;
    for _ in 0..passes {
        let (t, c) = (Instant::now(), cpu_seconds());
        let fps = files::fingerprints(&corpus);
        secs.push(t.elapsed().as_secs_f64());
        cpu.push(cpu_seconds() - c);
        seen = fps.len();
        assert!(fps.iter().all(|(_, fp)| fp.contains("sha256=")));
    }
    assert_eq!(seen as u64, count, "every file fingerprinted");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{{\"files\": {count}, \"size\": {size}, \"passes\": {passes}, \"seconds\": {secs:?}, \"cpu_seconds\": {cpu:?}, \"median_s\": {:.4}, \"median_cpu_s\": {:.4}}}",
        median(&secs),
        median(&cpu)
    );
    let _ = std::fs::remove_dir_all(&scratch);
}

/// This process's CPU time (user + system), from `/proc/self/stat` (Linux; 0 elsewhere):
/// on a busy machine the wall time counts the other processes too.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
        .sum();
    // USER_HZ is 100 on every Linux this runs on.
    ticks / 100.0
}

/// `DIR` (a folder of its own is made inside), else one under the temporary folder.
fn tempfile_dir(dir: Option<&String>) -> std::path::PathBuf {
    let base = dir.map_or_else(std::env::temp_dir, std::path::PathBuf::from);
    let path = base.join(format!("lavender-fingerprint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    path
}
