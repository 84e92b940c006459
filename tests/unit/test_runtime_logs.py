from pathlib import Path

from motor.runtime.logs import TAIL_WINDOW_BYTES, LogFile, tail


def test_tail_keeps_the_last_lines_cut_to_the_line_limit(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i} {'x' * i}\n" for i in range(50)))

    assert tail(log, 3).splitlines() == [f"line {i} {'x' * i}" for i in (47, 48, 49)]
    assert tail(log, 2, line_limit=7).splitlines() == ["line 48", "line 49"]


def test_tail_reads_only_the_end_of_a_large_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_bytes(b"old\n" * (TAIL_WINDOW_BYTES // 2) + b"last\n")

    assert tail(log, 1) == "last"
    assert "old" in tail(log, 10**6) and len(tail(log, 10**6)) <= TAIL_WINDOW_BYTES


def test_tail_says_why_there_is_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty.log").write_text("")

    assert tail(tmp_path / "empty.log") == "(log is empty)"
    assert tail(tmp_path / "missing.log").startswith(f"(log {tmp_path / 'missing.log'} unreadable:")


def test_invalid_utf8_is_replaced_not_raised(tmp_path: Path) -> None:
    log = tmp_path / "binary.log"
    log.write_bytes(b"ok\n\xff\xfe broken\n")

    assert tail(log, 1) == "\ufffd\ufffd broken"


def test_log_file_appends_with_a_banner_or_truncates(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "engine.log"
    with LogFile(path, banner="engine starting").open() as handle:
        handle.write(b"first run\n")
    with LogFile(path, banner="engine starting").open() as handle:
        handle.write(b"second run\n")

    text = path.read_text()
    assert text.count("=== engine starting at ") == 2 and "first run" in text and "second run" in text

    with LogFile(path, truncate=True).open() as handle:
        handle.write(b"only\n")
    assert path.read_text() == "only\n"
