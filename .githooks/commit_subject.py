"""commit-msg hook: the subject is at most 72 characters and starts with an area prefix (`area: ` or
`area(part): `), as CONTRIBUTING.md asks. Usage: commit_subject.py MESSAGE_FILE (git passes it)."""

import re
import sys

SUBJECT = re.compile(r"^(merge|[a-z][a-z0-9_/-]*(\([a-z0-9_./-]+\))?): \S")


def problem(subject: str) -> str | None:
    if len(subject) > 72:
        return f"the subject has {len(subject)} characters; at most 72 (put the detail in the body)"
    if not SUBJECT.match(subject):
        return "the subject starts with an area prefix: `datacenter: ...` or `catalog(moe): ...`"
    return None


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = [ln for ln in f.read().splitlines() if not ln.startswith("#")]
    subject = lines[0] if lines else ""
    reason = problem(subject)
    if reason:
        print(f"commit message: {reason}: {subject!r}", file=sys.stderr)
        sys.exit(1)
