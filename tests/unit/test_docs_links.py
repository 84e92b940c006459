"""Every relative link in README.md and docs/**/*.md resolves: its file exists, and its #anchor names a heading.

Links are read with markdown-it-py (CommonMark + tables), so code spans and fenced blocks are never mistaken for
links. Anchors follow GitHub's heading slugs: the heading's text, lower-cased, without punctuation, spaces turned
into hyphens, and `-1`, `-2`, ... appended to repeats within one page.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

REPO = Path(__file__).resolve().parents[2]
PARSER = MarkdownIt("commonmark").enable("table")
URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
NOT_IN_SLUG = re.compile(r"[^\w\- ]")


@dataclass(frozen=True)
class Link:
    line: int
    target: str


def markdown_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def github_slug(heading: str) -> str:
    return NOT_IN_SLUG.sub("", heading.strip().lower()).replace(" ", "-")


def inline_text(inline: Token) -> str:
    return "".join(child.content for child in inline.children or () if child.type in ("text", "code_inline"))


def heading_anchors(text: str) -> set[str]:
    tokens = PARSER.parse(text)
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for opening, inline in pairwise(tokens):
        if opening.type != "heading_open":
            continue
        slug = github_slug(inline_text(inline))
        repeats = seen.get(slug, 0)
        seen[slug] = repeats + 1
        anchors.add(slug if repeats == 0 else f"{slug}-{repeats}")
    return anchors


def links(text: str) -> Iterator[Link]:
    for token in PARSER.parse(text):
        if token.type != "inline" or token.map is None:
            continue
        line = token.map[0] + 1
        for child in token.children or ():
            if child.type in ("softbreak", "hardbreak"):
                line += 1
            elif child.type == "link_open":
                yield Link(line, str(child.attrs["href"]))
            elif child.type == "image":
                yield Link(line, str(child.attrs["src"]))


def link_problems(source: Path, repo: Path) -> list[str]:
    """What is wrong with each relative link of one Markdown file, as `path:line: target: why`."""
    repo, source = repo.resolve(), source.resolve()
    problems = []
    own_anchors = heading_anchors(source.read_text())
    for link in links(source.read_text()):
        if URL_SCHEME.match(link.target):
            continue
        path_part, _, anchor = link.target.partition("#")
        path_part, anchor = unquote(path_part), unquote(anchor)
        if not path_part:
            target, anchors = source, own_anchors
        else:
            base = repo if path_part.startswith("/") else source.parent
            target = (base / path_part.lstrip("/")).resolve()
            anchors = None
        where = f"{source.relative_to(repo)}:{link.line}: {link.target}"
        if not target.is_relative_to(repo):
            problems.append(f"{where}: points outside the repository")
        elif not target.exists():
            problems.append(f"{where}: no such file")
        elif anchor and target.suffix == ".md":
            if anchors is None:
                anchors = heading_anchors(target.read_text())
            if anchor not in anchors:
                problems.append(
                    f"{where}: no heading with the anchor #{anchor} in {target.relative_to(repo)}"
                )
    return problems


@pytest.mark.parametrize("source", markdown_files(REPO), ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_resolves(source: Path) -> None:
    problems = link_problems(source, REPO)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_every_docs_page_is_in_the_index() -> None:
    index = REPO / "docs" / "README.md"
    linked = {
        (index.parent / unquote(link.target.partition("#")[0])).resolve() for link in links(index.read_text())
    }
    pages = set(markdown_files(REPO)[1:]) - {index}
    assert not pages - linked, f"pages missing from docs/README.md: {sorted(map(str, pages - linked))}"


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Real engine (vLLM on CPU)", "real-engine-vllm-on-cpu"),
        ("Configuration, plan and CLI", "configuration-plan-and-cli"),
        ("kv_transfer_params", "kv_transfer_params"),
        ("A → B: what's new?", "a--b-whats-new"),
        ("  Whole-topology rules ", "whole-topology-rules"),
    ],
)
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_code_spans_count_in_heading_anchors_and_repeats_are_numbered() -> None:
    text = "# The `motor deploy` command\n\n## Tests\n\n## Tests\n\n```\n# not a heading\n```\n"
    assert heading_anchors(text) == {"the-motor-deploy-command", "tests", "tests-1"}


def test_broken_files_and_anchors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs" / "design").mkdir(parents=True)
    (tmp_path / "docs" / "page.md").write_text("# Page\n\n## Known `section`\n")
    (tmp_path / "docs" / "design" / "note.md").write_text("# Note\n\n[up](../page.md#known-section)\n")
    (tmp_path / "README.md").write_text(
        "# Intro\n\n"
        "[ok](docs/page.md) [ok anchor](docs/page.md#known-section) [self](#intro) [web](https://example.com/x)\n"
        "[missing file](docs/nothing.md) [missing anchor](docs/page.md#unknown)\n"
        "[missing own anchor](#nowhere) ![missing image](img/none.png)\n"
        "`[not a link](nowhere.md)`\n\n"
        "```\n[not a link either](nowhere.md)\n```\n"
    )
    assert link_problems(tmp_path / "docs" / "design" / "note.md", tmp_path) == []
    assert link_problems(tmp_path / "README.md", tmp_path) == [
        "README.md:4: docs/nothing.md: no such file",
        "README.md:4: docs/page.md#unknown: no heading with the anchor #unknown in docs/page.md",
        "README.md:5: #nowhere: no heading with the anchor #nowhere in README.md",
        "README.md:5: img/none.png: no such file",
    ]
