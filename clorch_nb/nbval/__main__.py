"""``python -m clorch_nb.nbval``: print the path of clorch_nb's nbval sanitize file."""

from clorch_nb.nbval import sanitize_file

print(sanitize_file())
