"""Scoring: BLEU as the paper reports it (bleu), EVALB's bracket F1 (evalb), linearised trees (trees), and
scoring parses from fairseq-generate output (parses)."""
