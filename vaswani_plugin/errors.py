"""The plugin's exception types (a leaf: imports nothing); vaswani_plugin.cli prints them as one line."""


class VaswaniConfigError(ValueError):
    """A user's mistake (a bad combination of options, a malformed input file); the message says what to change."""


class MissingExtra(VaswaniConfigError, ImportError):
    """An optional package is not installed: an ImportError to code that imports the module needing it, one line
    from a command."""


CTRANSLATE2_MISSING = 'this needs the package ctranslate2: pip install -e ".[ctranslate2]" (or pip install ctranslate2)'
TRANSFORMERS_MISSING = ('this needs the package transformers: pip install -e ".[huggingface]" '
                        '(or pip install transformers)')
