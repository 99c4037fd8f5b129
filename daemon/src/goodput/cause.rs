//! What the daemon can see of why training got slower, between the moment the step
//! time went above the limit and the alert: other processes' CPU use
//! (`/proc/<pid>/stat`), CPU steal and I/O wait (`/proc/stat`), swap in use
//! (`/proc/meminfo`), and the GPUs' clocks where `nvidia-smi` is. Reading walks
//! `/proc`: call it on the blocking pool. Elsewhere than Linux only the GPU part
//! is there.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// How long `nvidia-smi` may take.
const GPU_TIMEOUT: Duration = Duration::from_secs(3);

/// Processes named in the alert at most: on a busy machine the culprit may share
/// the CPUs with several others.
const TOP: usize = 5;
/// A process under this share of one CPU over the window is not named.
const NAMED_FROM: f64 = 0.10;

/// One look at the machine.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    at: Instant,
    /// `/proc/stat`'s first line: every CPU's jiffies by kind.
    cpu: Option<CpuTimes>,
    /// pid → (name, process group, utime + stime in jiffies).
    procs: HashMap<i32, (String, i32, u64)>,
}

#[derive(Debug, Clone, Copy, Default)]
struct CpuTimes {
    total: u64,
    iowait: u64,
    steal: u64,
}

/// What changed between two readings, as the alert says it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    /// (name, pid, share of one CPU) of the busiest other processes, busiest first.
    pub others: Vec<(String, i32, f64)>,
    pub steal_pct: Option<f64>,
    pub iowait_pct: Option<f64>,
    pub swap_used_bytes: Option<u64>,
    /// `nvidia-smi`'s clocks and temperature, one line per GPU.
    pub gpu: Option<String>,
}

impl Reading {
    pub(crate) fn take() -> Reading {
        Reading {
            at: Instant::now(),
            cpu: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|t| parse_cpu(&t)),
            procs: processes(),
        }
    }
}

/// Compares two readings; `worker_group` (the worker's process group) and this
/// daemon are not "other processes".
pub(crate) fn compare(before: &Reading, after: &Reading, worker_group: Option<i32>) -> Seen {
    let secs = after.at.duration_since(before.at).as_secs_f64().max(1e-3);
    let hz = clock_ticks();
    let own = std::process::id() as i32;
    let mut others: Vec<(String, i32, f64)> = after
        .procs
        .iter()
        .filter(|(pid, (_, group, _))| **pid != own && Some(*group) != worker_group)
        .filter_map(|(pid, (name, _, ticks))| {
            let (_, _, was) = before.procs.get(pid)?;
            let share = ticks.saturating_sub(*was) as f64 / hz / secs;
            (share >= NAMED_FROM).then(|| (name.clone(), *pid, share))
        })
        .collect();
    others.sort_by(|a, b| b.2.total_cmp(&a.2));
    others.truncate(TOP);
    let pct = |f: fn(&CpuTimes) -> u64| {
        let (a, b) = (before.cpu?, after.cpu?);
        let total = b.total.saturating_sub(a.total);
        (total > 0).then(|| f(&b).saturating_sub(f(&a)) as f64 * 100.0 / total as f64)
    };
    Seen {
        others,
        steal_pct: pct(|c| c.steal),
        iowait_pct: pct(|c| c.iowait),
        swap_used_bytes: std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| swap_used(&t)),
        gpu: gpu_clocks(),
    }
}

impl std::fmt::Display for Seen {
    /// "other processes: stress (pid 4242) 98 % of a CPU; CPU steal 0.0 %, I/O wait
    /// 0.4 %; swap in use 0 MiB"
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.others.is_empty() {
            parts.push("no other process busy".to_string());
        } else {
            let named: Vec<String> = self
                .others
                .iter()
                .map(|(name, pid, share)| {
                    format!("{name} (pid {pid}) {:.0} % of a CPU", share * 100.0)
                })
                .collect();
            parts.push(format!("other processes: {}", named.join(", ")));
        }
        let mut cpu = String::new();
        if let Some(s) = self.steal_pct {
            let _ = write!(cpu, "CPU steal {s:.1} %");
        }
        if let Some(w) = self.iowait_pct {
            if !cpu.is_empty() {
                cpu.push_str(", ");
            }
            let _ = write!(cpu, "I/O wait {w:.1} %");
        }
        if !cpu.is_empty() {
            parts.push(cpu);
        }
        if let Some(b) = self.swap_used_bytes {
            parts.push(format!("swap in use {} MiB", b / (1024 * 1024)));
        }
        if let Some(g) = &self.gpu {
            parts.push(format!("GPU {g}"));
        }
        f.write_str(&parts.join("; "))
    }
}

fn parse_cpu(stat: &str) -> Option<CpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is within user).
    Some(CpuTimes {
        total: v.iter().take(8).sum(),
        iowait: *v.get(4)?,
        steal: v.get(7).copied().unwrap_or(0),
    })
}

fn swap_used(meminfo: &str) -> Option<u64> {
    let kib = |key: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    Some(kib("SwapTotal:")?.saturating_sub(kib("SwapFree:")?) * 1024)
}

/// Every process's name, group and CPU time, from `/proc/<pid>/stat`.
fn processes() -> HashMap<i32, (String, i32, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(&stat).map(|p| (pid, p))
        })
        .collect()
}

/// `pid (name) state ppid pgrp … utime stime …`: the name may hold spaces and
/// parentheses, so the fields are counted from its last `)`.
fn parse_stat(stat: &str) -> Option<(String, i32, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
    // rest[0] is the state (field 3); pgrp is field 5, utime 14, stime 15.
    let pgrp = rest.get(2)?.parse().ok()?;
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((name, pgrp, utime + stime))
}

fn clock_ticks() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

/// `nvidia-smi`'s SM clock against its maximum and the temperature, per GPU;
/// `None` without the tool or a GPU. A wedged driver (a cause of the slowdown
/// itself) hangs the tool: it gets a few seconds, then the reading says so.
fn gpu_clocks() -> Option<String> {
    gpu_clocks_from(&crate::evidence::tool::find("nvidia-smi", &[])?)
}

fn gpu_clocks_from(program: &std::path::Path) -> Option<String> {
    let args = [
        "--query-gpu=index,clocks.sm,clocks.max.sm,temperature.gpu".to_string(),
        "--format=csv,noheader,nounits".to_string(),
    ];
    let (ran, out) = crate::evidence::tool::run(program, &args, GPU_TIMEOUT, 64 * 1024);
    match ran {
        crate::evidence::tool::Ran::Ok => {}
        crate::evidence::tool::Ran::TimedOut { .. } => {
            return Some(format!(
                "(nvidia-smi did not answer within {} s)",
                GPU_TIMEOUT.as_secs()
            ));
        }
        _ => return None,
    }
    let lines: Vec<String> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            Some(format!(
                "{}: SM clock {} of {} MHz, {} °C",
                f.first()?,
                f.get(1)?,
                f.get(2)?,
                f.get(3)?
            ))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_tool_that_hangs_is_given_up_on_and_said() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let tool = dir.path().join("nvidia-smi");
        std::fs::write(&tool, "#!/bin/sh\nexec sleep 60\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A script just written may be busy for a moment (ETXTBSY: another test's
        // fork holding it): tried again then.
        let run = |tool: &std::path::Path| {
            for _ in 0..20 {
                if let Some(said) = gpu_clocks_from(tool) {
                    return said;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            panic!("{} never ran", tool.display());
        };
        assert_eq!(run(&tool), "(nvidia-smi did not answer within 3 s)");
        std::fs::write(
            &tool,
            "#!/bin/sh\necho '0, 1410, 1980, 71'\necho '1, 900, 1980, 88'\n",
        )
        .unwrap();
        assert_eq!(
            run(&tool),
            "0: SM clock 1410 of 1980 MHz, 71 °C, 1: SM clock 900 of 1980 MHz, 88 °C"
        );
    }

    #[test]
    fn proc_files_parse() {
        let stat = "cpu  100 5 50 1000 20 1 2 7 0 0\ncpu0 1 2 3\n";
        let c = parse_cpu(stat).unwrap();
        assert_eq!((c.total, c.iowait, c.steal), (1185, 20, 7));
        let meminfo = "MemTotal: 100 kB\nSwapTotal:  2048 kB\nSwapFree:  1024 kB\n";
        assert_eq!(swap_used(meminfo), Some(1024 * 1024));
        let p = "42 (a (b) c) R 1 42 42 0 -1 0 0 0 0 0 300 45 0 0 20 0 1 0";
        assert_eq!(parse_stat(p), Some(("a (b) c".into(), 42, 345)));
    }

    #[test]
    fn a_busy_process_beside_the_worker_is_named_and_the_worker_is_not() {
        let own = std::process::id() as i32;
        let mut before = Reading {
            at: Instant::now(),
            cpu: Some(CpuTimes {
                total: 1000,
                iowait: 10,
                steal: 0,
            }),
            procs: HashMap::new(),
        };
        before.procs.insert(10, ("hog".into(), 10, 0));
        before.procs.insert(20, ("worker".into(), 20, 0));
        before.procs.insert(own, ("lavenderd".into(), own, 0));
        let mut after = before.clone();
        after.at = before.at + std::time::Duration::from_secs(10);
        after.cpu = Some(CpuTimes {
            total: 3000,
            iowait: 110,
            steal: 200,
        });
        let hz = clock_ticks() as u64;
        after.procs.insert(10, ("hog".into(), 10, 9 * hz));
        after.procs.insert(20, ("worker".into(), 20, 10 * hz));
        after.procs.insert(own, ("lavenderd".into(), own, 10 * hz));
        let seen = compare(&before, &after, Some(20));
        assert_eq!(seen.others, vec![("hog".to_string(), 10, 0.9)]);
        assert_eq!(seen.steal_pct, Some(10.0));
        assert_eq!(seen.iowait_pct, Some(5.0));
        let text = seen.to_string();
        assert!(
            text.starts_with(
                "other processes: hog (pid 10) 90 % of a CPU; CPU steal 10.0 %, I/O wait 5.0 %"
            ),
            "{text}"
        );
    }
}
