//! How long libgomp (libtorch's OpenMP, in the worker and in the torch of a Python
//! that lavender runs) spins for the next parallel region before its threads sleep.
//!
//! libgomp spins 300,000 times (a few ms) by default, and for ever with
//! `OMP_WAIT_POLICY=ACTIVE`. On a machine whose cores are busy with anything else, a
//! spinning thread waits for a peer that is not scheduled, and a small model trains
//! 5-10x slower (measured: 1.6 vs 9.7 steps/s for the tiny model on two loaded cores).
//! Not spinning at all (`PASSIVE`) makes every operation of a step end in a sleep and
//! a wake-up, which on a virtual machine costs the host's wake-up latency: the tiny
//! model trained at 40 steps/s passive against 56 with a short spin, on the same idle
//! 2-core VM. A spin of [`SPIN_COUNT`] keeps both: it covers the gap between two
//! operations of a step, and under load it gives the core up within a tenth of a
//! millisecond (with two busy loops on the two cores: 16-18 steps/s, passive 15-16).
//! libgomp reads the setting once, when it is loaded: it goes in a process's
//! environment before it starts.

/// `GOMP_SPINCOUNT`: about 0.1 ms here.
pub const SPIN_COUNT: &str = "10000";

/// The variable that gives a process started now the short spin, or `None` where the
/// user chose (`GOMP_SPINCOUNT` or `OMP_WAIT_POLICY` set here, which the process
/// inherits).
pub fn short_spin() -> Option<(&'static str, &'static str)> {
    short_spin_in(|var| std::env::var_os(var).is_some())
}

fn short_spin_in(is_set: impl Fn(&str) -> bool) -> Option<(&'static str, &'static str)> {
    let chosen = ["GOMP_SPINCOUNT", "OMP_WAIT_POLICY"]
        .into_iter()
        .any(is_set);
    (!chosen).then_some(("GOMP_SPINCOUNT", SPIN_COUNT))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_short_spin_is_given_unless_the_user_chose_a_wait() {
        let spin = Some(("GOMP_SPINCOUNT", SPIN_COUNT));
        for (set, want) in [
            (&[][..], spin),
            (&["GOMP_SPINCOUNT"][..], None),
            (&["OMP_WAIT_POLICY"][..], None),
            (&["OMP_NUM_THREADS"][..], spin),
        ] {
            assert_eq!(short_spin_in(|var| set.contains(&var)), want, "{set:?}");
        }
    }
}
