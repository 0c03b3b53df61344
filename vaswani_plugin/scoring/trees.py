"""Constituency trees for §6.3: Penn Treebank brackets, their usual clean-up, and trees as token sequences.

The sequence form is Vinyals & Kaiser's (2015, "Grammar as a Foreign Language"): the source is the words; the
target is the tree with an opening token per constituent ("(NP"), a closing token (")NP"), and a leaf for every
part-of-speech tag with its word: the word itself (the default here), or the placeholder XX (Vinyals & Kaiser's
form, keep_words=False):
    (TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))  ->  (S (NP The cat )NP (VP sat )VP . )S
                                                           or  (S (NP XX XX )NP (VP XX )VP XX )S
TOP (the treebank's unlabelled outer bracket, or ROOT) is implicit in the sequence. Any token that is not a
bracket token is a leaf: the words come back from the input, in order.
"""

import re
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Union

from vaswani_plugin.errors import VaswaniConfigError

PLACEHOLDER = "XX"
ROOT = "TOP"
ITEM = re.compile(r"[()]|[^\s()]+")
# The treebank's words for brackets (a bare one would be read as structure).
PTB_BRACKETS = {"(": "-LRB-", ")": "-RRB-"}


@dataclass
class Tree:
    """A constituent, or a pre-terminal: label = the POS tag, children = [the word]."""

    label: str
    children: List[Union["Tree", str]] = field(default_factory=list)

    @property
    def is_preterminal(self) -> bool:
        return len(self.children) == 1 and isinstance(self.children[0], str)

    def preterminals(self) -> Iterator["Tree"]:
        if self.is_preterminal:
            yield self
        else:
            for child in self.children:
                yield from child.preterminals()

    def words(self) -> List[str]:
        return [p.children[0] for p in self.preterminals()]

    def tags(self) -> List[str]:
        return [p.label for p in self.preterminals()]

    def __str__(self) -> str:
        """One line of brackets, as EVALB and the treebank write them (a bracket as a word: -LRB-, -RRB-)."""
        inside = " ".join(
            str(child) if isinstance(child, Tree) else PTB_BRACKETS.get(child, child) for child in self.children
        )
        return f"({PTB_BRACKETS.get(self.label, self.label)} {inside})"


def read_trees(text: str) -> List[Tree]:
    """Every tree of a treebank file (.mrg, GUM's .ptb, or one tree per line). The outer bracket becomes TOP.
    A malformed file is a one-line error naming the line and the tree."""
    trees, stack, tree_start = [], [], 0
    items = [(m.group(), m.start()) for m in ITEM.finditer(text)]

    def error(message: str, position: int) -> VaswaniConfigError:
        line = text.count("\n", 0, position) + 1
        return VaswaniConfigError(f"line {line} (tree {len(trees) + 1}): {message}")

    i = 0
    while i < len(items):
        item, position = items[i]
        if item == "(":
            label = ""
            if i + 1 < len(items) and items[i + 1][0] not in ("(", ")"):
                label, i = items[i + 1][0], i + 1
            if not stack:
                tree_start = position
                if label in ("", "ROOT"):
                    label = ROOT  # the treebank's unlabelled outer bracket (GUM: ROOT)
            stack.append(Tree(label))
        elif item == ")":
            if not stack:
                raise error("a closing bracket with nothing open (unbalanced brackets)", position)
            tree = stack.pop()
            if not tree.children:
                raise error(
                    f"({tree.label} ) holds nothing: a bracket written as a word? The treebank writes the "
                    "words ( and ) as -LRB- and -RRB-",
                    position,
                )
            if stack:
                stack[-1].children.append(tree)
            else:
                trees.append(tree if tree.label == ROOT else Tree(ROOT, [tree]))
        else:
            if not stack:
                raise error(f"a word outside any bracket: {item!r}", position)
            stack[-1].children.append(item)
        i += 1
    if stack:
        raise error("the tree starting here is never closed (unbalanced brackets)", tree_start)
    return trees


def bare_label(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP, ADVP|PRT -> ADVP; tags like -LRB- and -NONE- stay as they are."""
    if label.startswith("-"):
        return label
    for mark in ("-", "=", "|"):
        label = label.split(mark, 1)[0]
    return label


def clean(tree: Tree) -> Optional[Tree]:
    """The standard clean-up: traces (-NONE-) and the constituents left empty by their removal go, function
    tags and co-indices are cut from the labels. None if nothing is left."""
    if tree.is_preterminal:
        return None if tree.label == "-NONE-" else Tree(tree.label, list(tree.children))
    children = [c for c in (clean(child) for child in tree.children) if c is not None]
    return Tree(bare_label(tree.label), children) if children else None


def is_bracket(token: str) -> bool:
    """(LABEL or )LABEL; every other token of a sequence is a leaf (a word, or XX)."""
    return len(token) > 1 and token[0] in "()"


def linearise(tree: Tree, keep_words: bool = True) -> List[str]:
    """The target sequence of a tree (see the module's docstring): leaves are the words, or XX."""

    def walk(node: Tree) -> Iterator[str]:
        if node.is_preterminal:
            yield node.children[0] if keep_words else PLACEHOLDER
            return
        yield f"({node.label}"
        for child in node.children:
            yield from walk(child)
        yield f"){node.label}"

    children = tree.children if tree.label == ROOT else [tree]
    return [token for child in children for token in walk(child)]


def delinearise(tokens: Sequence[str], words: Sequence[str], tags: Optional[Sequence[str]] = None) -> Tree:
    """The tree of a well-formed sequence over `words` (tags: the pre-terminal labels, default XX); its leaves
    take the words of `words`, in order."""
    tags = tags or [PLACEHOLDER] * len(words)
    stack, word = [Tree(ROOT)], 0
    for token in tokens:
        if not is_bracket(token):
            if word >= len(words):
                raise VaswaniConfigError(f"more leaves than the {len(words)} words")
            stack[-1].children.append(Tree(tags[word], [words[word]]))
            word += 1
        elif token.startswith("("):
            stack.append(Tree(token[1:]))
        elif token.startswith(")") and len(stack) > 1:
            node = stack.pop()
            stack[-1].children.append(node)
        else:
            raise VaswaniConfigError(f"not a well-formed tree sequence at {token!r}: {' '.join(tokens)}")
    if len(stack) != 1 or word != len(words):
        raise VaswaniConfigError(f"not a well-formed tree sequence over {len(words)} words: {' '.join(tokens)}")
    return stack[0]


def is_one_tree(tokens: Sequence[str]) -> bool:
    """Whether a well-formed sequence is one constituent (one root, as every treebank tree), not a forest: its
    first token opens the bracket that its last token closes."""
    depth = 0
    for position, token in enumerate(tokens):
        depth += token.startswith("(") and is_bracket(token)
        depth -= token.startswith(")") and is_bracket(token)
        if depth == 0 and position < len(tokens) - 1:
            return False
    return bool(tokens) and is_bracket(tokens[0]) and depth == 0


def repair(tokens: Sequence[str], word_count: int) -> List[str]:
    """A well-formed sequence over exactly `word_count` words, from any model output, deterministically:
    closing brackets with nothing open are dropped; leaves beyond the word count are dropped, missing ones are
    added as XX at the end of the innermost open constituent (or at the top); brackets still open are closed;
    constituents left with no word are removed."""
    stack: List[List[str]] = [[]]  # token lists of the open constituents; stack[0] is the top level
    labels: List[str] = []
    placed = 0
    for token in tokens:
        if not is_bracket(token):
            if placed < word_count:
                stack[-1].append(token)
                placed += 1
        elif token.startswith("(") and len(token) > 1:
            stack.append([])
            labels.append(token[1:])
        elif token.startswith(")") and len(stack) > 1:
            close(stack, labels)
    stack[-1].extend([PLACEHOLDER] * (word_count - placed))
    while len(stack) > 1:
        close(stack, labels)
    return stack[0]


def close(stack: List[List[str]], labels: List[str]) -> None:
    """Close the innermost open constituent; one with no word inside is dropped."""
    inside, label = stack.pop(), labels.pop()
    if not all(map(is_bracket, inside)):
        stack[-1].extend([f"({label}", *inside, f"){label}"])
