"""How long a test waits before it calls a wait a hang.

Each test waits on an event (a process's exit, a heartbeat's step) and gives up only
after this bound, which catches a hang and says nothing about speed: beside the Rust
suite (four tests at once on two cores, their fsyncs queued ahead of ours) a script
that takes a second alone has taken more than a minute."""

HANG_S = 300.0
