"""User-facing errors: one clear line on stderr and a non-zero exit."""
import sys

EXIT_USAGE = 2


class UserInputError(Exception):
    """Bad input (flag, file, TF_CONFIG) that the user can fix.

    The message names the flag or file and says what was expected.
    """


class TaskFailure(Exception):
    """The machine failed the task (full disk, SIGTERM): one line, `exit_code`."""

    def __init__(self, message, exit_code=1):
        super().__init__(message)
        self.exit_code = exit_code


def first_line(error):
    """The first line of an exception's message (TF errors: without the op trace)."""
    text = (getattr(error, 'message', None) or str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def run_cli(main, argv=None):
    """Runs `main(argv)`, turning `UserInputError` into `error: ...` + exit 2."""
    try:
        result = main(argv)
    except UserInputError as e:
        sys.stderr.write('error: %s\n' % e)
        sys.stderr.flush()
        sys.exit(EXIT_USAGE)
    except TaskFailure as e:
        sys.stderr.write('error: %s\n' % e)
        sys.stderr.flush()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write('interrupted\n')
        sys.exit(130)
    sys.exit(result or 0)
