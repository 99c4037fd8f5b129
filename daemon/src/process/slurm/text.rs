//! How Slurm prints what lavender reads: `Key=Value` fields of a one-line
//! `scontrol -o` record, and host lists (`n[1-3,7]`).

/// The value of `key=` in a one-line `scontrol -o` record (values never hold spaces
/// for the keys read here).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// Expands a Slurm host list: `n[1-3,7]` → n1 n2 n3 n7, `gpu-[07-08],login` →
/// gpu-07 gpu-08 login (zero padding kept). Text it does not understand is kept
/// as one name rather than dropped.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut names = Vec::new();
    for item in split_top_level(list) {
        let Some((prefix, rest)) = item.split_once('[') else {
            if !item.is_empty() {
                names.push(item.to_string());
            }
            continue;
        };
        let Some((ranges, suffix)) = rest.split_once(']') else {
            names.push(item.to_string());
            continue;
        };
        let before = names.len();
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            match (lo.parse::<u64>(), hi.parse::<u64>()) {
                (Ok(a), Ok(b)) if a <= b && b - a < 100_000 => {
                    for n in a..=b {
                        names.push(format!("{prefix}{n:0width$}{suffix}", width = lo.len()));
                    }
                }
                _ => {
                    names.truncate(before);
                    names.push(item.to_string());
                    break;
                }
            }
        }
    }
    names
}

/// Splits at the commas that are not inside brackets.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(list[start..].trim());
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand() {
        assert_eq!(expand_hostlist("n[1-2]"), ["n1", "n2"]);
        assert_eq!(expand_hostlist("n1"), ["n1"]);
        assert_eq!(
            expand_hostlist("gpu-[07-09,11],login"),
            ["gpu-07", "gpu-08", "gpu-09", "gpu-11", "login"]
        );
        assert_eq!(expand_hostlist("a,b"), ["a", "b"]);
        assert_eq!(expand_hostlist(""), Vec::<String>::new());
        assert_eq!(expand_hostlist("n[x-y]"), ["n[x-y]"], "kept, not dropped");
    }
}
