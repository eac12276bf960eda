"""CSV and JSONL sources: streamed, and precise about what is wrong with a file."""

from __future__ import annotations

import errno
import itertools
import json
import os
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest

from trioplay import PlayInputError
from trioplay.adapters import CsvSource, JsonlSource, readers

if TYPE_CHECKING:
    from pathlib import Path


def write(path: Path, content: str | bytes) -> str:
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return str(path)


def error_of(source: CsvSource | JsonlSource) -> PlayInputError:
    with pytest.raises(PlayInputError) as info:
        source.validate()
    return info.value


# --- CSV: good files -------------------------------------------------------


def test_csv_rows_are_dicts_of_strings(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "name,domain,employees\nAcme,acme.com,12\nInitech,,\n")
    source = CsvSource(path, required=["name"])
    assert source.validate() == 2
    assert list(source) == [
        {"name": "Acme", "domain": "acme.com", "employees": "12"},
        {"name": "Initech", "domain": "", "employees": ""},
    ]


def test_csv_tolerates_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path / "leads.csv", b"\xef\xbb\xbfname,domain\r\n\r\nAcme,acme.com\r\n\r\n\r\n"
    )
    source = CsvSource(path, required=["domain"])
    assert source.validate() == 1
    assert list(source) == [{"name": "Acme", "domain": "acme.com"}]


def test_csv_header_only_has_no_rows(tmp_path: Path) -> None:
    source = CsvSource(write(tmp_path / "a.csv", "name,domain\n"), required=["domain"])
    assert source.validate() == 0
    assert list(source) == []


def test_csv_quoted_fields_keep_commas_and_newlines(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", 'name,note\nAcme,"one, two\nthree"\nInitech,"say ""hi"""\n')
    assert list(CsvSource(path)) == [
        {"name": "Acme", "note": "one, two\nthree"},
        {"name": "Initech", "note": 'say "hi"'},
    ]


def test_csv_iterates_afresh_each_time(tmp_path: Path) -> None:
    source = CsvSource(write(tmp_path / "a.csv", "n\n1\n2\n"))
    assert list(source) == list(source) == [{"n": "1"}, {"n": "2"}]


def test_path_repr_and_string_required(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", "domain\nacme.com\n")
    source = CsvSource(tmp_path / "a.csv", required="domain")
    assert source.path == path
    assert source.required == ("domain",)
    assert repr(source) == f"CsvSource({path!r}, required=['domain'])"
    assert repr(JsonlSource(path)) == f"JsonlSource({path!r})"


# --- CSV: bad files --------------------------------------------------------


def test_missing_required_column_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "name,website\nAcme,acme.com\n")
    error = error_of(CsvSource(path, required=["domain"]))
    assert str(error) == (
        f"{path}, line 1, column 'domain': required column is missing (found: name, website)"
    )
    assert (error.path, error.line, error.column) == (path, 1, "domain")


def test_missing_required_columns_are_all_named(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "name, domain\n")
    message = str(error_of(CsvSource(path, required=["domain", "email"])))
    assert message == (
        f"{path}, line 1, column 'domain': required column is missing "
        "(found: name, ' domain'); also missing: email"
    )


def test_header_after_blank_lines_is_reported_on_its_own_line(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "\n\nname\n")
    error = error_of(CsvSource(path, required=["domain"]))
    assert (error.line, error.column) == (3, "domain")


def test_wrong_field_count_names_the_physical_line(tmp_path: Path) -> None:
    # The quoted newline makes record 2 span lines 2-3, so the bad record is on line 5.
    text = 'name,domain\n"Acme\nCorp",acme.com\n\nInitech,initech.com,extra\n'
    path = write(tmp_path / "leads.csv", text)
    error = error_of(CsvSource(path))
    assert str(error) == f"{path}, line 5: expected 2 fields (name, domain), found 3"
    assert error.line == 5


def test_empty_required_value_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "name,domain\nAcme,acme.com\nInitech,  \n")
    error = error_of(CsvSource(path, required=["domain"]))
    assert str(error) == f"{path}, line 3, column 'domain': required value is empty"


def test_stray_quote_is_malformed(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", 'name,domain\nAcme,acme.com\nIni"tech,"x"y\n')
    error = error_of(CsvSource(path))
    assert error.line == 3
    assert str(error).startswith(f"{path}, line 3: malformed CSV")


def test_unterminated_quote_points_at_the_record_start(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", 'name,domain\nAcme,"acme.com\nInitech,initech.com\n')
    error = error_of(CsvSource(path))
    assert error.line == 2
    assert "malformed CSV" in str(error)


@pytest.mark.parametrize(
    ("header", "column", "message"),
    [
        ("name,domain,name", "name", "column name appears twice in the header"),
        ("name,,domain", None, "column 2 has no name in the header"),
    ],
)
def test_bad_header(tmp_path: Path, header: str, column: str | None, message: str) -> None:
    path = write(tmp_path / "leads.csv", header + "\n")
    error = error_of(CsvSource(path))
    assert (error.line, error.column) == (1, column)
    assert str(error).endswith(message)


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "\n\n")
    error = error_of(CsvSource(path))
    assert str(error) == f"{path}, line 1: file is empty; expected a header line naming the columns"


def test_missing_file_and_directory(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.csv")
    assert str(error_of(CsvSource(missing))) == f"{missing}: file not found"
    assert str(error_of(JsonlSource(str(tmp_path)))) == f"{tmp_path}: is a directory, not a file"
    with pytest.raises(PlayInputError, match="file not found"):
        next(iter(CsvSource(missing)))


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "a.csv", "name\n")
    if os.geteuid() != 0:
        os.chmod(path, 0)
    else:
        # Root reads any file (CI runs as root): refuse it as the OS refuses anyone else.
        def refusing_open(file: str, *args: Any, **kwargs: Any) -> Any:
            if os.fspath(file) == path:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return open(file, *args, **kwargs)

        monkeypatch.setattr(readers, "open", refusing_open, raising=False)
    assert str(error_of(CsvSource(path))) == f"{path}: permission denied"


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    # Far enough down that the text layer's read-ahead would hide the line.
    good = "".join(f"Acme {i},acme{i}.com\n" for i in range(5000))
    path = write(tmp_path / "leads.csv", b"name,domain\n" + good.encode() + b"Caf\xe9,cafe.fr\n")
    error = error_of(CsvSource(path))
    assert str(error) == (
        f"{path}, line 5002: not valid UTF-8 (byte 0xe9 at byte 4 of the line); "
        "save the file as UTF-8"
    )
    with pytest.raises(PlayInputError, match="line 5002: not valid UTF-8"):
        list(CsvSource(path))


def test_utf16_file_gets_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "name,domain\nAcme,acme.com\n".encode("utf-16"))
    assert str(error_of(CsvSource(path))) == f"{path}, line 1: file is UTF-16; save it as UTF-8"


def test_quick_validate_checks_header_and_first_row_only(tmp_path: Path) -> None:
    path = write(tmp_path / "leads.csv", "name,domain\nAcme,acme.com\nbroken\n")
    source = CsvSource(path, required=["domain"])
    assert source.validate(full=False) is None
    with pytest.raises(PlayInputError, match="line 3"):
        source.validate()
    with pytest.raises(PlayInputError, match="line 1, column 'email'"):
        CsvSource(path, required=["email"]).validate(full=False)
    bad_first = write(tmp_path / "b.csv", "name,domain\nAcme,\n")
    with pytest.raises(PlayInputError, match="line 2, column 'domain'"):
        CsvSource(bad_first, required=["domain"]).validate(full=False)


# --- streaming --------------------------------------------------------------


def test_iteration_is_lazy_and_checks_rows_as_it_reads(tmp_path: Path) -> None:
    rows = "".join(f"Company {i},c{i}.example.com\n" for i in range(50_000))
    path = write(tmp_path / "big.csv", "name,domain\n" + rows + "Broken,\n")
    source = CsvSource(path, required=["domain"])
    # The first page is served although the file is bad further down...
    page = list(itertools.islice(source, 1000))
    assert page[999] == {"name": "Company 999", "domain": "c999.example.com"}
    # ...and the bad row fails when it is reached, with its line.
    with pytest.raises(PlayInputError, match="line 50002, column 'domain'"):
        for _ in source:
            pass


def test_large_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    # 20,000 rows: a file past the bound (1.1 MB), whose rows held at once
    # would take about 10 MB, ten times it; streaming peaks near 40 kB.
    count = 20_000
    path = tmp_path / "big.jsonl"
    with path.open("w", encoding="utf-8") as file:
        for i in range(count):
            file.write(json.dumps({"name": f"Company {i}", "domain": f"c{i}.example.com"}) + "\n")
    assert path.stat().st_size > 1_000_000
    source = JsonlSource(path, required=["domain"])
    tracemalloc.start()
    try:
        assert source.validate() == count
        seen = sum(1 for _ in source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == count
    assert peak < 1_000_000


# --- JSONL ------------------------------------------------------------------


def test_jsonl_rows_keep_their_json_types(tmp_path: Path) -> None:
    text = '{"domain": "acme.com", "n": 3, "tags": ["a"]}\n\n  \n{"domain": "x.io", "n": null}\n\n'
    source = JsonlSource(write(tmp_path / "a.jsonl", "\ufeff" + text), required=["domain"])
    assert source.validate() == 2
    assert list(source) == [
        {"domain": "acme.com", "n": 3, "tags": ["a"]},
        {"domain": "x.io", "n": None},
    ]


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ('{"domain": "x.io",}', None, "not valid JSON (Expecting property name enclosed in "),
        ('["x.io"]', None, "expected a JSON object, found an array"),
        ('"x.io"', None, "expected a JSON object, found a string"),
        ('{"domain": NaN}', None, "not valid JSON (NaN is not allowed)"),
        ('{"name": "x"}', "domain", "required key is missing"),
        ('{"domain": null}', "domain", "required value is empty"),
        ('{"domain": " "}', "domain", "required value is empty"),
    ],
)
def test_jsonl_bad_line(tmp_path: Path, line: str, column: str | None, message: str) -> None:
    path = write(tmp_path / "a.jsonl", '{"domain": "acme.com"}\n\n' + line + "\n")
    error = error_of(JsonlSource(path, required=["domain"]))
    assert (error.path, error.line, error.column) == (path, 3, column)
    place = f"{path}, line 3" + (f", column {column!r}" if column else "")
    assert str(error).startswith(f"{place}: {message}")


def test_jsonl_empty_file_has_no_rows(tmp_path: Path) -> None:
    source = JsonlSource(write(tmp_path / "a.jsonl", ""))
    assert source.validate() == 0
    assert source.validate(full=False) is None


def test_a_field_over_the_limit_names_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text("id,text\n1," + "x" * 140_000 + "\n")
    with pytest.raises(PlayInputError, match=r"line 2: a field is longer than 131,072 characters"):
        CsvSource(path).validate()
    assert CsvSource(path, field_limit=150_000).validate() == 1
