"""commit-msg hook (.pre-commit-config.yaml): the subject is one line of at most 72 characters; the detail and any
figures go in the body, after a blank line. Exit 1 with one line on stderr otherwise."""

import sys

LIMIT = 72


def problem(message: str) -> str | None:
    lines = [ln for ln in message.splitlines() if not ln.startswith("#")]
    subject = lines[0].strip() if lines else ""
    if not subject:
        return "the commit message has no subject"
    if len(subject) > LIMIT:
        return "the subject is %d characters, at most %d: put the detail in the body" % (len(subject), LIMIT)
    if len(lines) > 1 and lines[1].strip():
        return "a blank line goes between the subject and the body"
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: check_commit_subject.py COMMIT_MSG_FILE", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        why = problem(f.read())
    if why:
        print("commit message: " + why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
