"""The documentation keeps its commands honest.

Every command in README.md and docs/*.md (fenced code blocks and inline `code`) that runs one of
the scripts (``scripts/train.py``, ``evaluate.py``, ``plot.py``, ``tune.py``, ``benchmark.py``)
is parsed, and each option it uses must be one of that script's parser's option strings (for
``tune.py``, the options after ``--`` are ``train.py``'s). Inline code that names an option alone
(`--q-lambda`) must name an option of some script. A renamed or removed option therefore fails
here until the docs follow. Also checked: README's size and shape, its set-up commands, that
every relative link points at a file (and heading) that exists, and that the pages stay reference,
not diary (no table cell over 200 characters, none of the words of a lab notebook).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from vecdqn.cli import build_parser as train_parser
from vecdqn.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
SCRIPTS = ("train", "evaluate", "plot", "tune", "benchmark")

# The README's two set-up commands: its install block's last line (after the clone and the virtualenv)
# installs PyTorch 2.13.0 and vecdqn and starts training; the development command installs every extra
# and runs the tests. Both name PyTorch's CPU index as an extra index: pip takes 2.13.0+cpu from it where
# it is reachable (a local version sorts above the plain one) and PyPI's 2.13.0 where it is not, so a
# mirror or a proxy still installs the tested version rather than the newest torch>=2.3. "&&" stops each
# at a failed install.
CPU_TORCH = "pip install torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu"
SETUP_COMMAND = f"{CPU_TORCH} -e . && python scripts/train.py --preset catch"
DEV_COMMAND = f'{CPU_TORCH} -e ".[dev,plot,ray,track,tune]" && python -m pytest'
# Words of a lab notebook, not of a reference (regular expressions, matched in lower case): what was
# tried when, and what else ran on the machine beside a run, belong in the commit messages. "Alone"
# only after a machine or a run ("the EPYC VM, alone"; "each alone"), not "the env pipeline alone".
DIARY_WORDS = (
    r"sitting", r"load average", r"of the time", r"another day", r"other days", r"day to day", r"between days",
    r"\b(?:two|three|several) days\b", r"shared the cores", r"low-priority (?:\w+ )?tests?\b",
    r"(?:,|\beach(?: run)?|\bvm|\bmachine) alone\b", r"^\s*alone[:;)]",
    r"\bevaluated at commit\b", r"\bwe (?:tried|ran|saw|found|measured)\b", r"\bthis (?:session|morning)\b",
    r"\btoday\b", r"\byesterday\b", r"\btonight\b", r"\b(?:was|were) rerun\b", r"\brerun (?:at|of|alone)\b",
)
# Options of other programs that the docs name in inline code on their own (pip's, Ray's).
FOREIGN_OPTIONS = {"--index-url", "--extra-index-url", "--head", "--address"}

SCRIPT_RE = re.compile(r"(?<![\w.-])scripts/(" + "|".join(SCRIPTS) + r")\.py\b")
FENCE_RE = re.compile(r"^\s*(```|~~~)")
SHELL_OPERATORS = {"&&", "||", "|", ";", "&"}


@functools.cache
def script_options(name: str) -> frozenset[str]:
    """Every option string of ``scripts/<name>.py``'s parser (``--no-x`` forms included)."""
    if name == "train":
        parser = train_parser()
    else:
        spec = importlib.util.spec_from_file_location(f"_docs_script_{name}", ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        parser = module.build_parser()
    # argparse has no public list of a parser's options (vecdqn.cli.explicit_options reads the same)
    return frozenset(flag for action in parser._actions for flag in action.option_strings)  # noqa: SLF001


@functools.cache
def all_options() -> frozenset[str]:
    return frozenset().union(*(script_options(name) for name in SCRIPTS))


def split_markdown(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """``(code lines, prose lines)`` as ``(line number, text)``: the lines of fenced code blocks
    (a line ending in ``\\`` joined with the next) and every other line."""
    code, prose, fenced, pending = [], [], False, None
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE_RE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            prose.append((number, line))
            continue
        if pending is not None:
            start, joined = pending
            line, number = joined + " " + line.strip(), start
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        pending = None
        code.append((number, line))
    return code, prose


def inline_spans(prose: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The inline code spans of the prose, as ``(line number, text)``; a span may run over a
    line break within a paragraph (the break reads as a space)."""
    spans, paragraph = [], []
    for number, line in [*prose, (0, "")]:
        if line.strip():
            paragraph.append((number, line))
            continue
        text = "\n".join(line for _, line in paragraph)
        starts = [n for n, _ in paragraph]
        for match in re.finditer(r"(`+)(.+?)\1", text, flags=re.S):
            first = starts[text.count("\n", 0, match.start())]
            spans.append((first, match.group(2).replace("\n", " ").strip()))
        paragraph = []
    return spans


def tokens_of(command: str) -> list[str]:
    """Shell words of ``command`` (quotes removed, ``#`` comments dropped)."""
    try:
        return shlex.split(command, comments=True)
    except ValueError:  # an unbalanced quote in prose: plain words are good enough here
        return command.split()


def commands_in(text: str) -> list[tuple[str, list[str]]]:
    """Each script run in ``text``: ``(script name, its arguments)`` up to the end of its command
    (a shell operator or a redirection)."""
    found = []
    for match in SCRIPT_RE.finditer(text):
        args = []
        for token in tokens_of(text[match.end():]):
            if token in SHELL_OPERATORS or token == "<" or token.startswith((">", "1>", "2>")):
                break
            args.append(token)
        found.append((match.group(1), args))
    return found


def option_problems(script: str, args: list[str]) -> list[str]:
    """What is wrong with the options of one command: unknown options, unknown presets."""
    problems, parser_of = [], script
    for i, raw in enumerate(args):
        token = raw.strip("[],")
        if token == "--" and script == "tune":
            parser_of = "train"  # tune.py passes what follows -- to train.py
            continue
        if " " in token or not re.match(r"-(-[a-z]|[A-Za-z])", token):
            continue  # a value (a quoted string of options, a number, a path)
        flag = token.split("=", 1)[0]
        if flag not in script_options(parser_of):
            problems.append(f"{flag} is not an option of scripts/{parser_of}.py")
        if flag == "--preset" and parser_of == "train":
            value = token.split("=", 1)[1] if "=" in token else (args[i + 1] if i + 1 < len(args) else "")
            if re.fullmatch(r"[a-z0-9-]+", value) and value not in PRESETS:
                problems.append(f"--preset {value} is not a preset (there are {sorted(PRESETS)})")
    return problems


def page_problems(path: Path) -> tuple[list[str], set[str]]:
    """``(problems, the scripts whose commands were checked)`` of one Markdown page."""
    code, prose = split_markdown(path.read_text())
    spans = inline_spans(prose)
    problems, seen = [], set()
    for number, text in code + spans:
        for script, args in commands_in(text):
            seen.add(script)
            problems += [f"{path.name}:{number}: {p} (in: {text})" for p in option_problems(script, args)]
    for number, text in spans:
        first = text.split()[0] if text.split() else ""
        named = re.match(r"--[a-z][a-z0-9-]*", first)
        if named and not SCRIPT_RE.search(text):
            flag = named.group(0)
            if flag not in all_options() and flag not in FOREIGN_OPTIONS:
                problems.append(f"{path.name}:{number}: `{text}` names {flag}, an option of no script")
    for number, line in prose:  # a command in plain prose would escape the checks above
        outside = re.sub(r"(`+).+?\1", "", line)
        if SCRIPT_RE.search(outside):
            problems.append(f"{path.name}:{number}: a script named outside code; put it in `code`: {line.strip()}")
    return problems, seen


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_documented_option_exists(path):
    problems, _ = page_problems(path)
    assert not problems, "\n".join(problems)


def test_every_script_has_a_checked_command():
    """The extraction finds commands at all: each script is run somewhere in the docs."""
    seen = set().union(*(page_problems(path)[1] for path in PAGES))
    assert seen == set(SCRIPTS)


@pytest.mark.parametrize("command, problem", [
    ("python scripts/train.py --preset catch --totl-steps 100", "--totl-steps is not an option of scripts/train.py"),
    ("python scripts/train.py --preset cartpole", "--preset cartpole is not a preset"),
    ("python scripts/evaluate.py runs/<run> --episode 3", "--episode is not an option of scripts/evaluate.py"),
    ("python scripts/tune.py --n-trials 2 -- --preset catch --no-such",
     "--no-such is not an option of scripts/train.py"),
    ("python scripts/plot.py runs/a -x out.png", "-x is not an option of scripts/plot.py"),
])
def test_a_renamed_option_is_caught(tmp_path, command, problem):
    page = tmp_path / "page.md"
    page.write_text(f"Run it:\n\n```bash\n{command}\n```\n\nor inline: `{command}`.\n")
    problems, seen = page_problems(page)
    assert len(problems) == 2 and all(problem in p for p in problems), problems
    page.write_text("Prose with `--no-such-flag` alone.\n")
    assert "an option of no script" in page_problems(page)[0][0]


def test_commands_are_cut_at_shell_operators_and_continued_over_backslashes(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\npython scripts/train.py --preset catch \\\n    --seed 2 && ls --no-such\n```\n")
    code, _ = split_markdown(page.read_text())
    assert code == [(2, "python scripts/train.py --preset catch  --seed 2 && ls --no-such")]
    assert commands_in(code[0][1]) == [("train", ["--preset", "catch", "--seed", "2"])]
    assert page_problems(page)[0] == []


def test_readme_shape():
    text = README.read_text()
    lines = text.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; keep it at most 250 (details go to docs/)"
    _, prose = split_markdown(text)
    long = [f"{n}: {len(line)} characters" for n, line in prose if len(line) > 200]
    assert not long, "README.md lines over 200 characters outside code blocks:\n" + "\n".join(long)
    # Its table cells: test_no_table_cell_over_200_characters, as for every page.
    first_install = next(n for n, line in enumerate(lines, start=1) if "pip install" in line)
    assert first_install <= 40, f"the first pip install is on line {first_install}; bring it within the first 40"
    code, _ = split_markdown(text)
    assert DEV_COMMAND in [line.strip() for _, line in code], f"README.md lost its test command: {DEV_COMMAND}"


def test_readme_sets_up_in_two_commands():
    """The first install block is the clone, the virtualenv and `SETUP_COMMAND`; the README's code
    blocks hold no other pip command than it and `DEV_COMMAND`."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    install = next(block for block in blocks if "pip install" in block)
    lines = [line.strip() for line in install.splitlines() if line.strip()]
    assert lines[0].startswith("git clone ") and lines[1].startswith("python -m venv "), lines
    assert lines[2:] == [SETUP_COMMAND], lines
    pips = [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("pip ")]
    assert pips == [SETUP_COMMAND, DEV_COMMAND], pips


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_table_cell_over_200_characters(path):
    _, prose = split_markdown(path.read_text())
    cells = [f"{n}: {cell.strip()[:40]}... ({len(cell.strip())})" for n, line in prose if line.lstrip().startswith("|")
             for cell in line.strip().strip("|").split("|") if len(cell.strip()) > 200]
    assert not cells, f"{path.name}: table cells over 200 characters (split the row):\n" + "\n".join(cells)


def diary_words(text: str) -> list[str]:
    """``"line: words"`` for each match of `DIARY_WORDS` in ``text`` (any case, code blocks too)."""
    return [f"{n}: {match.group(0)!r} in: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), start=1)
            for word in DIARY_WORDS for match in re.finditer(word, line.lower())]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_diary_words(path):
    found = diary_words(path.read_text())
    assert not found, f"{path.name}: diary words (history goes to the commit messages):\n" + "\n".join(found)


def test_the_diary_check_sees_the_words_in_any_case():
    found = diary_words("| a | b |\n|---|---|\n| In one Sitting | Load Average 2.0 |\nthe replay OF THE TIME\n"
                        "Seed 2, the EPYC VM, Alone; short tests Shared The Cores.\n"
                        "Each alone: rerun at abc1234 Today.\n")
    assert [entry.split(" in: ")[0] for entry in found] == [
        "3: 'sitting'", "3: 'load average'", "4: 'of the time'", "5: 'shared the cores'", "5: ', alone'",
        "6: 'each alone'", "6: 'today'", "6: 'rerun at'"]


def test_the_diary_check_leaves_reference_prose_alone():
    reference = ("The env pipeline alone: 3,889 agent steps/s; the emulator alone at ~2,850 per core.\n"
                 "Seed 2 first evaluated at ≥ +18 at 2,000,000 agent steps; sample alone, update alone.\n"
                 "Running the same command again replaces the table.\n"
                 "| `charts/episodic_return/actor_<i>` | actor i's games alone |\n"
                 "Alone, two threads make an update faster; inside a run they do not.\n")
    assert diary_words(reference) == []


# A figure named "measured" comes with the command that measures it: in its section (up to the next
# heading) a fenced code block or an inline `python scripts/...`-style command. A paragraph, list item
# or table is checked when it says "measured" (not "not yet measured", nor inside a link's target)
# and holds a number.
MEASURED_RE = re.compile(r"\bmeasured\b", re.I)
UNMEASURED_RE = re.compile(r"\b(?:not|never)(?: yet)?(?: been)? measured\b", re.I)
COMMAND_SPAN_RE = re.compile(r"^(?:[A-Z_]+=\S+ )*(?:timeout (?:-s \w+ )?\d+ )?(?:python|bash) \S")
ITEM_RE = re.compile(r"\s*(?:[-*]|\d+\.)\s")


def sections_of(text: str) -> list[tuple[str, list[tuple[int, str, bool]]]]:
    """``(heading, lines)`` per section of a Markdown page (the part before the first heading has
    the heading ``""``), each line as ``(line number, text, inside a fenced block)``."""
    found: list[tuple[str, list[tuple[int, str, bool]]]] = [("", [])]
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE_RE.match(line):
            fenced = not fenced
            found[-1][1].append((number, line, True))
        elif not fenced and re.match(r"#{1,6}\s", line):
            found.append((line.strip(), []))
        else:
            found[-1][1].append((number, line, fenced))
    return found


def unsourced_measurements(text: str) -> list[str]:
    """``"line: heading: paragraph"`` for each paragraph, list item or table that names a number
    "measured" in a section with no command."""
    problems = []
    for heading, lines in sections_of(text):
        code = [line for _, line, fenced in lines if fenced and line.strip() and not FENCE_RE.match(line)]
        prose = [(number, line) for number, line, fenced in lines if not fenced]
        if code or any(COMMAND_SPAN_RE.match(span) for _, span in inline_spans(prose)):
            continue
        blocks: list[list[tuple[int, str]]] = [[]]
        for number, line in prose:
            if not line.strip() or (ITEM_RE.match(line) and blocks[-1]):
                blocks.append([])
            if line.strip():
                blocks[-1].append((number, line))
        for block in filter(None, blocks):
            said = UNMEASURED_RE.sub("", re.sub(r"\]\([^)]*\)", "]", " ".join(line for _, line in block)))
            if MEASURED_RE.search(said) and re.search(r"\d", said):
                problems.append(f"{block[0][0]}: {heading or '(top)'}: {said.strip()[:100]}")
    return problems


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_measured_figure_has_its_command(path):
    found = unsourced_measurements(path.read_text())
    assert not found, (f"{path.name}: figures named measured without a command in their section (add the "
                       "command, a fenced block or inline `python scripts/...`):\n" + "\n".join(found))


def test_the_measured_check_wants_a_command_in_the_section():
    bare = "# Speed\n\nIntro.\n\n## Pong\n\n- It measured 86.8 agent steps/s (commit `51260ab`).\n- Fine.\n"
    assert [entry.split(": ")[0] for entry in unsourced_measurements(bare)] == ["7"]
    inline = bare.replace("- Fine.", "- `python scripts/train.py --preset pong` made it.")
    fenced = bare + "\n```bash\npython scripts/train.py --preset pong\n```\n"
    later = bare + "\n## Next\n\n```bash\npython scripts/train.py --preset pong\n```\n"
    unmeasured = "## GPU\n\n| figure | value |\n|---|---|\n| B = 32 | (not yet measured) |\n"
    linked = "## Tuning\n\nFive trials at 4e-4 to 4e-3 ([tuning](tuning.md#measured-catch)).\n"
    assert [unsourced_measurements(page) for page in (inline, fenced, unmeasured, linked)] == [[], [], [], []]
    assert unsourced_measurements(later) != []


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*]|\[([^]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    _, prose = split_markdown(path.read_text())
    found: dict[str, int] = {}
    for _, line in prose:
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            slug = github_slug(match.group(1))
            found[slug if slug not in found else f"{slug}-{found[slug]}"] = found.get(slug, 0) + 1
    return set(found)


@pytest.mark.parametrize("path", [*PAGES, ROOT / "runs" / "README.md"], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_point_at_what_exists(path):
    _, prose = split_markdown(path.read_text())
    problems = []
    for number, line in prose:
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"(`+).+?\1", "", line)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                problems.append(f"{path.name}:{number}: {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{path.name}:{number}: {target}: no heading #{anchor} in {linked.name}")
    assert not problems, "\n".join(problems)


# -- the results pages: their commands make their tables ------------------------------------------
RESULTS = ROOT / "docs" / "results.md"


def _steps_selected(option: str | None, step: int) -> bool:
    """Whether ``evaluate.py --steps option`` (FIRST:LAST:EVERY, parts may be empty) picks ``step``."""
    if option is None:
        return True
    first, last, every = (option.split(":") + ["", ""])[:3]
    first_i, every_i = int(first or 0), int(every or 1)
    return first_i <= step <= (int(last) if last else step) and (step - first_i) % every_i == 0


def results_tables(text: str) -> list[tuple[int, list[str], list[list[str]], list[list[str]]]]:
    """Each ``| agent steps | seed …: minutes | …`` table of a results page: ``(line, header, rows,
    commands)``, the commands being the tokens of the next bash block's command lines."""
    lines = text.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not line.startswith("| agent steps |") or ": minutes" not in line:
            continue
        header = [cell.strip() for cell in line.strip("|").split("|")]
        rows, j = [], i + 2
        while j < len(lines) and lines[j].startswith("|"):
            rows.append([cell.strip() for cell in lines[j].strip("|").split("|")])
            j += 1
        start = next(k for k in range(j, len(lines)) if lines[k].startswith("```bash"))
        end = next(k for k in range(start + 1, len(lines)) if lines[k].startswith("```"))
        block = "\n".join(lines[start + 1:end]).replace("\\\n", " ")
        found.append((i + 1, header, rows, [shlex.split(c) for c in block.splitlines() if c.strip()]))
    return found


def table_problems(header: list[str], rows: list[list[str]], commands: list[list[str]]) -> list[str]:
    """What a results table shows that its commands do not make: a plot.py command naming one run
    folder per seed column, and for each evaluated cell an evaluate.py command of that run whose
    ``--steps`` picks that agent step."""
    plots = [c for c in commands if any(t.endswith("scripts/plot.py") for t in c)]
    if not plots:
        return ["no scripts/plot.py command"]
    runs = [t for t in plots[-1] if t.startswith("runs/")]
    seeds = [k for k, cell in enumerate(header) if cell.endswith(": minutes")]
    if len(runs) != len(seeds):
        return [f"plot.py names {runs}, the table has {len(seeds)} seed columns"]
    problems = []
    for run, k in zip(runs, seeds):
        if k + 2 >= len(header) or header[k + 2] != "evaluation":
            continue
        picks = [c[c.index("--steps") + 1] if "--steps" in c else None for c in commands
                 if any(t.endswith("scripts/evaluate.py") for t in c) and run in c and "--every-checkpoint" in c]
        for row in rows:
            if row[k + 2] not in ("—", ""):
                step = int(row[0].replace(",", ""))
                if not any(_steps_selected(p, step) for p in picks):
                    problems.append(f"{run}: no evaluate.py --every-checkpoint command picks agent step {step:,}")
    return problems


def test_each_results_table_is_made_by_the_commands_below_it():
    tables = results_tables(RESULTS.read_text())
    assert tables, "docs/results.md has no plot.py table"
    for line, header, rows, commands in tables:
        assert not table_problems(header, rows, commands), (line, table_problems(header, rows, commands))


def test_the_results_check_sees_a_step_no_command_evaluates():
    text = ("| agent steps | seed 1: minutes | training | evaluation |\n|---|---|---|---|\n"
            "| 100,000 | 1.0 | −20.0 | −21.0 |\n| 150,000 | 1.5 | −19.0 | −18.0 |\n\n```bash\n"
            "python scripts/evaluate.py runs/a --every-checkpoint --steps ::100000\n"
            "python scripts/plot.py runs/a --markdown\n```\n")
    (_, header, rows, commands), = results_tables(text)
    assert table_problems(header, rows, commands) == ["runs/a: no evaluate.py --every-checkpoint command picks "
                                                     "agent step 150,000"]
    assert _steps_selected("1500000:", 4_750_080) and not _steps_selected("1500000::250000", 1_750_016)


def test_training_md_lists_every_option_a_resume_refuses():
    """The "Refused" bullet of docs/training.md's Resume section names exactly the options that
    carry the fixed_on_resume rule (it missed --seed and the Rainbow learner's)."""
    from vecdqn.config import option_flag, options_with

    text = (ROOT / "docs" / "training.md").read_text()
    bullet = text[text.index("- **Refused** (one line, exit code 2)"):]
    bullet = bullet[:bullet.index("\n- **")]
    named = set(re.findall(r"`(--[a-z0-9-]+)`", bullet)) - {"--log-dir", "--run-name"}
    assert named == {option_flag(name) for name in options_with("fixed_on_resume")}
