"""`ResumableLoader`: a `DataLoader` that goes on mid-epoch from where a checkpoint had
got to. Lightning (2.x) keeps a loader's `state_dict` in its checkpoint and hands it
to `load_state_dict` on a resume; a loop of one's own saves `loader.state_dict()` with
the model and calls `load_state_dict` before iterating. Without it a resume starts the
epoch's data over, and lavenderd's replay check reports the replayed steps as different.

    loader = ResumableLoader(dataset, batch_size=8)

Its order is the dataset's (shuffle in the dataset if wanted, with a seeded order).
"""

from __future__ import annotations

from torch.utils.data import DataLoader, Dataset, Sampler


class FromWhereItGot(Sampler):
    """The indices in order, from where the pass over them had got to."""

    def __init__(self, count: int):
        self.count, self.next = count, 0

    def __len__(self):
        return self.count

    def __iter__(self):
        start = self.next if self.next < self.count else 0  # a pass that got to the end: the next begins
        for i in range(start, self.count):
            self.next = i + 1
            yield i
        self.next = 0


class ResumableLoader(DataLoader):
    """A loader whose data position is in `state_dict` (the next index to read)."""

    def __init__(self, dataset: Dataset, batch_size: int, **options):
        super().__init__(dataset, batch_size=batch_size, sampler=FromWhereItGot(len(dataset)), **options)

    def state_dict(self):
        return {"next_index": self.sampler.next}

    def load_state_dict(self, state):
        """A checkpoint's position; anything but an index of the dataset is refused
        (`ValueError`), never guessed."""
        index = state.get("next_index") if isinstance(state, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= self.sampler.count:
            raise ValueError(f"the checkpoint's data position {state!r} is not an index of the {self.sampler.count}")
        self.sampler.next = index
