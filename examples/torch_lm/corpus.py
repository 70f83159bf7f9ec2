"""The training text and its tokenizer, built the same way by every process at start-up.

The corpus is the Python standard library's own sources (the .py files under the running
interpreter's stdlib folder, e.g. /usr/lib/python3.11 for Debian's python3, walked in
sorted order, tests and site-packages left out, up to a byte budget): present offline
wherever Python is. Tokens are words (runs of letters and underscores), runs of digits,
and single other non-space characters; the vocabulary is the most frequent V-1 of them
(ties by the token itself) plus <unk>, so it is fixed by the files alone.
"""

import collections
import hashlib
import os
import re
import sysconfig

import torch

TOKEN = re.compile(r"[A-Za-z_]+|[0-9]+|\S")
SKIP = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}


def source_files(root):
    """The .py files under @p root in a fixed order."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP)
        out += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    return out


class Corpus:
    """tokens: every token id of the text, in order (int64); words: id -> token."""

    def __init__(self, vocab_size, max_bytes, root=None):
        self.root = root or sysconfig.get_paths()["stdlib"]
        texts, size = [], 0
        for path in source_files(self.root):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
            size += len(texts[-1])
            if size >= max_bytes:
                break
        if not texts:
            raise SystemExit("no Python sources under %s" % self.root)
        self.files, self.chars = len(texts), size
        words = [TOKEN.findall(t) for t in texts]
        counts = collections.Counter(w for ws in words for w in ws)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:vocab_size - 1]
        self.words = ["<unk>"] + [w for w, _ in ranked]
        index = {w: i for i, w in enumerate(self.words)}
        self.tokens = torch.tensor([index.get(w, 0) for ws in words for w in ws],
                                   dtype=torch.int64)
        self.distinct = len(counts)
        self.vocab_size = vocab_size
        self.digest = hashlib.sha256(self.tokens.numpy().tobytes()).hexdigest()[:16]

    def batch(self, seed, step, sequences, length):
        """The global batch of @p step: @p sequences windows of length + 1 tokens at
        places drawn from a generator seeded by (seed, step); inputs and next tokens."""
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        starts = torch.randint(0, self.tokens.numel() - length - 1, (sequences,), generator=g)
        rows = torch.stack([self.tokens[s:s + length + 1] for s in starts.tolist()])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()

    def describe(self):
        return ("%d tokens (%d distinct, vocabulary %d) from %d files, %.1f MB of %s" %
                (self.tokens.numel(), self.distinct, self.vocab_size, self.files,
                 self.chars / 1e6, self.root))
