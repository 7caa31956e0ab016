#!/usr/bin/env python3
"""Every code quote in the writeup is the code it names, as it is now.

writeup/WRITEUP.md quotes the reference tasks line by line: each quote is a `path:first-last` line, then a
```cpp block holding those lines of that file, dedented. An edit to a quoted file moves or changes the lines; this
names each quote that no longer matches, with the lines the file now holds there, instead of leaving the
writeup to teach code that is gone.

    python3 tests/smoke/writeup_quotes.py [REPOSITORY_ROOT]
"""
import difflib
import pathlib
import re
import sys
import textwrap

QUOTE = re.compile(r"`([\w/.]+\.(?:cpp|hpp|cu|h)):(\d+)(?:-(\d+))?`\n```cpp\n(.*?)```", re.S)


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    writeup = root / "writeup" / "WRITEUP.md"
    quotes = list(QUOTE.finditer(writeup.read_text()))
    stale = 0
    for q in quotes:
        path, first = q.group(1), int(q.group(2))
        last = int(q.group(3) or first)
        source = root / path
        if not source.is_file():
            print(f"STALE: {writeup.name} quotes {path}:{first}-{last}, and there is no such file")
            stale += 1
            continue
        lines = source.read_text().split("\n")[first - 1 : last]
        now = textwrap.dedent("\n".join(lines)).strip().split("\n")
        quoted = q.group(4).strip().split("\n")
        if now != quoted:
            stale += 1
            print(f"STALE: {writeup.name} quotes {path}:{first}-{last}; the file differs there (- quoted, + now):")
            for line in difflib.unified_diff(quoted, now, lineterm="", n=0):
                if not line.startswith(("---", "+++")):
                    print("    " + line)
    print(f"{len(quotes)} quotes, {stale} stale")
    if quotes and stale == 0:
        print("EVERY_WRITEUP_QUOTE_MATCHES_ITS_SOURCE")
    return 1 if stale or not quotes else 0


if __name__ == "__main__":
    sys.exit(main())
