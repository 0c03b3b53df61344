"""generation/length.py: the one length limit (§6.1: input + 50), for ints, arrays and tensors alike."""

import numpy
import torch
from cli_helpers import REPO

from vaswani_plugin.generation.length import length_limit


def test_length_limit_is_floor_of_a_times_source_plus_b_capped_by_the_positions():
    # By hand: 1·12 + 50 = 62; ⌊1.5·7 + 3⌋ = 13; 1·300 + 50 = 350 > 256 − 1 positions.
    assert length_limit(1, 50, 12) == 62 and isinstance(length_limit(1, 50, 12), int)
    assert length_limit(1.5, 3, 7) == 13
    assert length_limit(1, 50, 300, max_positions=256) == 255
    assert length_limit(1.5, 3, numpy.array([7, 12])).tolist() == [13, 21]
    limits = length_limit(1.5, 3, torch.tensor([7, 12, 300]), max_positions=256)
    assert limits.dtype == torch.long and limits.tolist() == [13, 21, 255]


def test_no_other_module_computes_the_limit():
    package = REPO / "vaswani_plugin"
    computing = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if "max_len_a *" in path.read_text(encoding="utf-8")
    ]
    assert computing == ["generation/length.py"]
