"""What the documentation must satisfy beyond mkdocs --strict, checked by
`tools/docs.py build`: no phrase of the prose points at something that is not there
(`stale_reference_problems`, before mkdocs runs), every file the pages name is there and
every benchmark result is listed (`path_problems`, before too), and every in-page link
of the built site has its target (`anchor_problems`, after).
"""

import html.parser
import json
import re
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ in-page links


class _Anchors(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        names = ("id", "name") if tag == "a" else ("id",)  # <a name> is a target too
        self.ids.update(attrs[k] for k in names if attrs.get(k))
        href = attrs.get("href") or ""
        if tag == "a" and href.startswith("#") and href != "#":
            self.links.append(urllib.parse.unquote(href[1:]))


def page_anchors(text):
    """(ids, links) of an HTML page: the ids of its elements (and its <a name>s), and
    the targets x of its links "#x" in the order they come."""
    anchors = _Anchors()
    anchors.feed(text)
    return anchors.ids, anchors.links


def anchor_problems(site_dir):
    """Each link "#x" of a built page whose page has no element with id x: a contents
    entry or a "Skip to content" that jumps nowhere.

    Args:
        site_dir: path. The built site.

    Returns:
        list of str: "page: #x has no target", one for each page and missing target.
    """
    site_dir = Path(site_dir)
    problems = []
    for page in sorted(site_dir.rglob("*.html")):
        ids, links = page_anchors(page.read_text(errors="replace"))
        missing = dict.fromkeys(x for x in links if x not in ids)
        problems += [f"{page.relative_to(site_dir)}: #{x} has no target" for x in missing]
    return problems


# ----------------------------------------------------------- phrases that point nowhere


class Part:
    """One line of a text a reader reads: `where` it is, its `prose`, whether it shows a
    result (a table row; a notebook's code cell, whose output does), whether its phrases
    are read (not a notebook's code cell's: its output is), and its heading or bold lead
    ("**The input path** ..."), normalised, if it has one."""

    def __init__(self, where, prose, shows=False, code=False, read=True):
        self.where, self.prose, self.shows, self.read = where, prose, shows, read
        lead = None
        if not code:
            heading = re.match(r"\s*#{1,6}\s+(.*)", prose)
            bold = re.match(r"\s*(?:[-*]\s+)?\*\*([^*]+)\*\*", prose)
            lead = heading.group(1) if heading else bold.group(1) if bold else None
        self.label = normalised(lead) if lead else None


def normalised(text):
    return " ".join(re.sub(r"[`*_]", "", text).lower().rstrip(" .:").split())


def markdown_parts(text, where):
    """The Parts of a markdown text, one a line; `where(n)` names line n (from 1). A
    fenced code block's lines are neither tables nor headings, but their comments are
    read."""
    parts, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        opening = re.match(r"\s*(```|~~~)", line)
        if opening and fence is None:
            fence = opening.group(1)
        elif opening and line.strip().startswith(fence):
            fence = None
        code = fence is not None or opening is not None
        table = not code and line.strip().startswith("|")
        parts.append(Part(where(number), line, shows=table, code=code))
    return parts


def documents(root=ROOT):
    """(path, parts) of each text of the site: docs/**/*.md, and notebooks/*.ipynb (their
    markdown cells line by line, each code cell one part that shows its output)."""
    for path in sorted((root / "docs").rglob("*.md")):
        name = path.relative_to(root)
        yield name, markdown_parts(path.read_text(), lambda n, name=name: f"{name}:{n}")
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        name, parts = path.relative_to(root), []
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                where = lambda n, name=name, index=index: f"{name}, cell {index}, line {n}"  # noqa: E731
                parts += markdown_parts(source, where)
            elif cell["cell_type"] == "code":
                parts.append(Part(f"{name}, cell {index}", source, True, code=True, read=False))
        yield name, parts


def _side(parts, index, direction):
    return parts[:index] if direction == "above" else parts[index + 1 :]


def shown_result(match, parts, index, root):
    """ "the [X] table/numbers/scores/results above|below": a table (or a notebook's code
    cell) on that side, and X, if the phrase names one, in the text on that side."""
    qualifier, direction = normalised(match.group(1)), match.group(3).lower()
    side = _side(parts, index, direction)
    if not any(p.shows for p in side):
        return f"no table or output {direction} it"
    if qualifier and qualifier not in normalised(" ".join(p.prose for p in side)):
        return f"nothing {direction} it is about {match.group(1).strip()!r}"
    return None


def named_section(match, parts, index, root):
    """'"X" above|below': a heading or a bold lead X on that side of the same text."""
    name, direction = normalised(match.group(1)), match.group(2).lower()
    if not any(p.label == name for p in _side(parts, index, direction)):
        return f"no heading or bold lead {match.group(1)!r} {direction} it"
    return None


def page_section(match, parts, index, root):
    """'the P page, "X"' or 'the P page's "X"': a page P.md under docs/ with the heading
    or bold lead X."""
    pages = sorted((root / "docs").rglob(f"{match.group(1).lower()}.md"))
    if not pages:
        return f"no page docs/**/{match.group(1).lower()}.md"
    labels = {p.label for p in markdown_parts(pages[0].read_text(), str)}
    if normalised(match.group(2)) not in labels:
        return f"{pages[0].relative_to(root)} has no heading {match.group(2)!r}"
    return None


def readme_section(match, parts, index, root):
    """ "the README's X": a heading of README.md that names X (its first word)."""
    word = match.group(1).split()[0].lower().rstrip("s")
    headings = [p.label for p in markdown_parts((root / "README.md").read_text(), str)]
    if not any(word in (h or "").split() or f"{word}s" in (h or "").split() for h in headings):
        return f"README.md has no section on {match.group(1).strip()!r}"
    return None


# Each phrase that refers to another part of the docs, and the rule its target obeys.
STALE_REFERENCES = (
    (
        re.compile(
            r"\bthe ((?:(?!the\b)[\w'’-]+ ){0,3}?)(tables?|numbers|scores|results) (above|below)\b",
            re.I,
        ),
        shown_result,
    ),
    (re.compile(r"\"([^\"\n]{2,60})\" (above|below)\b", re.I), named_section),
    (re.compile(r"\bthe (\w+) page(?:,|['’]s) \"([^\"\n]+)\"", re.I), page_section),
    (re.compile(r"\bthe README['’]s ((?:[\w-]+ ?){1,3})", re.I), readme_section),
)


def stale_reference_problems(root=ROOT):
    """Each phrase of docs/**/*.md and the notebooks' markdown that points at a table,
    result, section or README part that is not where it says (STALE_REFERENCES).

    Args:
        root: path. The repository. Defaults to this one.

    Returns:
        list of str: "where: 'phrase': why".
    """
    root = Path(root)
    problems = []
    for _, parts in documents(root):
        for index, part in enumerate(parts):
            following = parts[index + 1 : index + 2]
            # A phrase may run on to the next line ("see the README's\nlimits").
            text = " ".join([part.prose] + [p.prose for p in following if p.read])
            for pattern, rule in STALE_REFERENCES if part.read else ():
                for match in pattern.finditer(text):
                    if match.start() >= len(part.prose):
                        continue  # the next line's own
                    why = rule(match, parts, index, root)
                    if why:
                        problems.append(f"{part.where}: {match.group().strip()!r}: {why}")
    return problems


# ------------------------------------------------------------------ paths and results

# `benchmarks/x.py`, `tests/a/test_b.py::test_c`, `benchmarks/results/cpu-*.json`: a
# repository path in backticks, with a test's name or a glob.
PATH = re.compile(
    r"`((?:benchmarks|keras_saat|tests|tools|docs|configs|notebooks|\.ci)/[\w./*-]*[\w*])"
    r"(?:::([\w-]+)[\w\[\]-]*)?`?"
)


def path_problems(root=ROOT):
    """Each repository path the pages name in backticks (docs/**/*.md, README.md,
    CONTRIBUTING.md, benchmarks/RESULTS.md) that is not there, each `file.py::test` whose
    test the file does not define, and each file of benchmarks/results/ that RESULTS.md
    does not list (the index a reader looks a number up in).

    Args:
        root: path. The repository. Defaults to this one.

    Returns:
        list of str: "where: `path`: why".
    """
    root = Path(root)
    texts = [*sorted((root / "docs").rglob("*.md")), root / "README.md", root / "CONTRIBUTING.md"]
    index = root / "benchmarks" / "RESULTS.md"
    bodies = {text: text.read_text() for text in [*texts, index] if text.is_file()}
    if index in bodies:  # its paths are relative to benchmarks/
        bodies[index] = bodies[index].replace("`results/", "`benchmarks/results/")
    problems = []
    for text, body in bodies.items():
        for number, line in enumerate(body.splitlines(), 1):
            for match in PATH.finditer(line):
                path, test = match.group(1), match.group(2)
                found = list(root.glob(path)) if "*" in path else [root / path]
                why = None
                if not any(p.exists() for p in found):
                    why = "no such file"
                elif test and not re.search(rf"\bdef {test}\b", found[0].read_text()):
                    why = f"{path} defines no {test}"
                if why:
                    where = f"{text.relative_to(root)}:{number}"
                    problems.append(f"{where}: `{match.group(1)}`: {why}")
    patterns = [m.group(1) for m in PATH.finditer(bodies.get(index, ""))]
    for result in sorted((root / "benchmarks" / "results").glob("*.json")):
        name = f"benchmarks/results/{result.name}"
        if not any(Path(name).match(p) for p in patterns):
            problems.append(f"benchmarks/RESULTS.md: `{name}`: not listed")
    return problems
