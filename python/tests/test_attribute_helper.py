"""`lavenderd attribute`'s Python helper (export/src/attribute/helper.py):
the label sampler its Hessian passes use instead of torch.multinomial, and its check
of the bergson internals it is written against."""

import importlib.util
from pathlib import Path

import pytest
import torch

HELPER = Path(__file__).resolve().parents[2] / "export/src/attribute/helper.py"


def load_helper():
    spec = importlib.util.spec_from_file_location("attribute_helper", HELPER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_one_draw_per_row_follows_the_rows_distribution():
    helper = load_helper()
    probs = torch.tensor([0.0, 0.5, 0.0, 0.3, 0.2, 0.0]).repeat(200_000, 1)
    generator = torch.Generator().manual_seed(7)
    drawn = helper.sample_one(probs, 1, replacement=True, generator=generator)
    assert drawn.shape == (200_000, 1)
    assert drawn.dtype == torch.int64
    freq = torch.bincount(drawn.flatten(), minlength=6).double() / drawn.numel()
    # Categories of mass 0 are never drawn; the others within 5 standard errors.
    assert freq[0] == freq[2] == freq[5] == 0
    for k, p in ((1, 0.5), (3, 0.3), (4, 0.2)):
        se = (p * (1 - p) / drawn.numel()) ** 0.5
        assert abs(freq[k].item() - p) < 5 * se, (k, freq)


def test_unnormalised_rows_are_drawn_by_their_own_total():
    helper = load_helper()
    probs = torch.tensor([[2.0, 0.0, 6.0]]).repeat(100_000, 1)
    generator = torch.Generator().manual_seed(1)
    drawn = helper.sample_one(probs, 1, replacement=True, generator=generator)
    freq = torch.bincount(drawn.flatten(), minlength=3).double() / drawn.numel()
    assert freq[1] == 0
    assert abs(freq[2].item() - 0.75) < 5 * (0.75 * 0.25 / drawn.numel()) ** 0.5


def test_other_calls_are_torchs_own():
    helper = load_helper()
    probs = torch.tensor([[0.25, 0.25, 0.5]])
    # Two draws without replacement: torch's, which never repeats a category.
    drawn = helper.sample_one(probs, 2, replacement=False)
    assert drawn.shape == (1, 2)
    assert drawn[0, 0] != drawn[0, 1]


def test_the_installed_bergson_has_what_the_helper_relies_on():
    # `make setup` and CI install bergson (scripts/attribution-setup.sh).
    from importlib.metadata import version

    helper = load_helper()
    if version("bergson") != helper.BERGSON_VERSION:
        pytest.fail(
            f"bergson {version('bergson')} is installed; the helper is written "
            f"against {helper.BERGSON_VERSION}: run bash scripts/attribution-setup.sh"
        )
    assert helper.bergson_internals() == []
