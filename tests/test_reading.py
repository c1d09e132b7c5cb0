"""docs/reading.md, the method in reading order (issue 71), is kept true: every stop
links the line that defines it, each span it says to read lies inside that
definition, each row's *calls* text is in those lines and names the next row's
function (the call an editor follows), and the page's totals are what its tables
add up to. The *what happens* column may name lines of another definition of the row's
file, as (`name`, L1-L2): they lie inside it and count; and a block of another file's
module constants, as `[path](../path) (its lines a-b)`: they count too. Read statically
(ast), nothing imported."""
import ast
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, "docs", "reading.md")
ROW = re.compile(r"^\| \[([^\]]+)\]\(\.\./([^)#]+)#L(\d+)\) \|([^|]+)\|([^|]*)\|(.*)\|\s*$")
SPAN = re.compile(r"L(\d+)(?:-L(\d+))?")
# In *what happens*: lines of the definition `name` of the row's file, and any line
# number at all (each must be one of those).
MENTION = re.compile(r"`([\w.]+)`, L(\d+)(?:-L(\d+))?")
LINE_NUMBER = re.compile(r"(?<![\w#])L\d+(?:-L\d+)?(?=[),;:. ]|$)")
# In *what happens*: a block of another file's module constants, unanchored (a #L
# anchor lands on a def or class: tests/test_docs.py), as `[path](../path) (its lines
# a-b)`: each line an assignment or a comment, at the top level; they count.
CONSTANTS = re.compile(r"\]\(\.\./([^)#]+)\) \(its lines (\d+)-(\d+)\)")
TOTALS = re.compile(r"<!-- reading:totals -->(.*?)<!-- /reading:totals -->")
SECTIONS = re.compile(r"<!-- reading:sections -->(.*?)<!-- /reading:sections -->")


def definitions(path):
    """{(line, name): end line} of every function and class of `path`."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return {(node.lineno, node.name): node.end_lineno for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def table_lines(text):
    """The page's tables: lists of their rows' lines."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if ROW.match(line):
            rows.append(line)
        elif rows:
            found.append(rows)
            rows = []
    return found


def tables(text):
    """The page's tables: lists of rows (label, path, line, spans, calls, what)."""
    found = []
    for lines in table_lines(text):
        rows = []
        for line in lines:
            label, path, number, spans, calls, what = ROW.match(line).groups()
            rows.append((label, path, int(number), [(int(a), int(b or a)) for a, b in
                                                    SPAN.findall(spans)],
                         calls.strip().strip("`"), what))
        found.append(rows)
    return found


def check(text, root):
    """[problem] of the page `text` against the sources under `root`; (files, lines,
    calls between files) it adds up to."""
    problems, lines, hops = [], {}, 0
    for rows in tables(text):
        for i, (label, path, number, spans, calls, what) in enumerate(rows):
            full = os.path.join(root, path)
            name = re.split(r"[.: ]", label)[-1]
            found = definitions(full) if os.path.isfile(full) else {}
            end = found.get((number, name))
            if end is None:
                problems.append(f"{label}: {path}:{number} does not define {name}")
                continue
            mentioned = MENTION.findall(what)
            if len(mentioned) != len(LINE_NUMBER.findall(what)):
                problems.append(f"{label}: a line number in 'what happens' without the "
                                "definition it lies in, as (`name`, L1-L2)")
            for other, a, b in mentioned:
                first, last = int(a), int(b or a)
                inside = [start for (start, def_name), def_end in found.items()
                          if def_name == other.split(".")[-1]
                          and start <= first <= last <= def_end]
                if not inside:
                    problems.append(f"{label}: L{first}-L{last} is not inside a "
                                    f"definition of {other} in {path}")
                lines.setdefault(path, set()).update(range(first, last + 1))
            for other, a, b in CONSTANTS.findall(what):
                problems += _constants(root, other, int(a), int(b), label)
                lines.setdefault(other, set()).update(range(int(a), int(b) + 1))
            if not spans:
                problems.append(f"{label}: no lines to read")
            with open(full, encoding="utf-8") as f:
                source = f.read().splitlines()
            read = ""
            for first, last in spans:
                if not number <= first <= last <= end:
                    problems.append(f"{label}: L{first}-L{last} is not inside its "
                                    f"definition, L{number}-L{end}")
                lines.setdefault(path, set()).update(range(first, last + 1))
                read += "\n".join(source[first - 1:last]) + "\n"
            if not calls:
                continue
            if calls not in read:
                problems.append(f"{label}: its lines do not hold {calls!r}")
            if i + 1 == len(rows):
                problems.append(f"{label}: calls {calls!r}, but no row follows")
                continue
            callee = re.split(r"[.: ]", rows[i + 1][0])[-1]
            # A Keras layer's `call` and an object's `__call__` run as `x(...)`.
            if callee not in calls and not (callee in ("call", "__call__")
                                            and calls.endswith("(")):
                problems.append(f"{label}: {calls!r} does not call {rows[i + 1][0]}")
            hops += rows[i + 1][1] != path
    return problems, (len(lines), sum(len(v) for v in lines.values()), hops)


def _constants(root, path, first, last, label):
    """[problem] of a row's `(its lines first-last)` of the file `path`: each line a
    top-level assignment or a comment."""
    full = os.path.join(root, path)
    if not os.path.isfile(full):
        return [f"{label}: {path} does not exist"]
    with open(full, encoding="utf-8") as f:
        source = f.read().splitlines()
    if not 1 <= first <= last <= len(source):
        return [f"{label}: {path} has no lines {first}-{last}"]
    return [f"{label}: {path}:{number} is not a module constant or a comment"
            for number in range(first, last + 1)
            if not re.match(r"(#|[A-Z_][A-Z0-9_]* = )", source[number - 1])]


def test_the_reading_order_is_true():
    with open(PAGE, encoding="utf-8") as f:
        text = f.read()
    problems, (files, lines, hops) = check(text, REPO)
    assert problems == []
    stated = TOTALS.search(text)
    assert stated is not None, "the page's totals marker is missing"
    assert stated.group(1) == (f"{files} files, {lines} lines, {hops} calls between "
                               "files"), "recount: " + str((files, lines, hops))
    assert len(tables(text)) == 4  # the page's four sections
    # Each section counted alone: its table as a page of its own.
    counts = []
    for number, section in enumerate(table_lines(text), 1):
        _, (files, lines, hops) = check("\n".join(section), REPO)
        counts.append(f"{number}. {files} files, {lines} lines, {hops} calls")
    stated = SECTIONS.search(text)
    assert stated is not None, "the page's per-section marker is missing"
    assert stated.group(1) == "; ".join(counts), "recount: " + "; ".join(counts)


@pytest.mark.parametrize("fault", ["renamed", "moved", "no call", "wrong callee",
                                   "mention outside", "bare line number",
                                   "constants moved"])
def test_the_check_fails_on_a_planted_fault(tmp_path, fault):
    (tmp_path / "a.py").write_text(
        "def first():\n    x = 1\n    return second(x)\n\n\n"
        "def second(x):\n    return x\n")
    (tmp_path / "b.py").write_text("def third():\n    return 3\n")
    (tmp_path / "c.py").write_text("import os\n# Constants.\nA = 1\nB_2 = 2\n")
    rows = ["| [a.first](../a.py#L1) | L2-L3 | `second(` | |",
            "| [a.second](../a.py#L6) | L6-L7 | | returns (`first`, L1), as [c](../c.py) "
            "(its lines 2-4) |"]
    good, counts = check("\n".join(rows), str(tmp_path))
    assert good == [] and counts == (2, 8, 0)  # the unplanted page passes
    if fault == "renamed":
        rows[1] = rows[1].replace("a.second", "a.later")
    elif fault == "moved":
        rows[0] = rows[0].replace("L2-L3", "L2-L6")
    elif fault == "no call":
        rows[0] = rows[0].replace("`second(`", "`third(`")
    elif fault == "wrong callee":
        rows[1] = "| [b.third](../b.py#L1) | L1-L2 | | |"
    elif fault == "mention outside":
        rows[1] = rows[1].replace("(`first`, L1)", "(`first`, L1-L6)")
    elif fault == "constants moved":  # a line inserted above them
        rows[1] = rows[1].replace("(its lines 2-4)", "(its lines 1-3)")
    else:
        rows[1] = rows[1].replace("(`first`, L1)", "(L1)")
    problems, _ = check("\n".join(rows), str(tmp_path))
    assert len(problems) >= 1, fault
