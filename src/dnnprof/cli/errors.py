"""Errors a user can fix: printed as one line naming the file and the problem, exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (a path, a file's contents, an option)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
