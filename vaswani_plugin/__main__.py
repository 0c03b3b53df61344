"""`python -m vaswani_plugin` prints the package directory, for `--user-dir $(python -m vaswani_plugin)`."""

import os

import vaswani_plugin

print(os.path.dirname(os.path.abspath(vaswani_plugin.__file__)))
