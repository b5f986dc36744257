"""Upload progress: a ticker line is for a terminal, a plain line for every reader."""

from __future__ import annotations

import pytest


def test_a_ticker_line_is_left_out_of_a_pipe_and_a_plain_line_is_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from lifecycle.cli import _say
    from lifecycle.ticker import Ticker

    _say(Ticker("c: uploaded 1.0 MiB of 2.0 MiB (1.0 MiB/s, 0:01 left)"))
    _say("c: verified")
    assert capsys.readouterr().err == "  | c: verified\n"
