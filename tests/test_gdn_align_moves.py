"""The boundary a step's accepted tokens reach (prefix caching, align mode), against a scan of every position."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ascend_spec.vllm.gdn_align_moves import boundary_reached


@given(
    block_size=st.integers(1, 64),
    committed=st.integers(0, 1000),
    first=st.integers(1, 8),
    drafts=st.integers(0, 16),
    data=st.data(),
)
def test_boundary_reached_is_the_last_block_end_among_the_accepted_tokens(
    block_size: int, committed: int, first: int, drafts: int, data: st.DataObject
) -> None:
    running_tokens = committed + first  # through the step's first token (a prefill chunk: ``first`` tokens)
    accepted = data.draw(st.integers(1, drafts + 1))
    new_computed = running_tokens + accepted - 1
    ends = [n for n in range(running_tokens, new_computed + 1) if n % block_size == 0]
    reached = boundary_reached(
        committed=committed, running_tokens=running_tokens, accepted=accepted, block_size=block_size
    )
    if not ends:
        assert reached is None
        return
    assert reached is not None
    aligned = ends[-1]
    assert reached.column == aligned // block_size - 1  # the block whose last token is the boundary's
    assert reached.tokens == aligned - committed  # records committed on top of the running slot's state
    assert reached.inside_draft == (aligned > running_tokens)
    assert reached.partial == (aligned < new_computed)
