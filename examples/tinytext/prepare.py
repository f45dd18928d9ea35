#!/usr/bin/env python3
"""Turns input.txt into train.bin: one uint16 token id per character, as
nanoGPT's shakespeare_char prepare.py does, with ids in order of first use so
that they fit the bundled model's vocabulary of 65. Standard library only.

usage: prepare.py INPUT.txt OUT.bin [VOCAB_SIZE]"""
import array
import sys


def main():
    src, out = sys.argv[1], sys.argv[2]
    vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 65
    text = open(src, encoding="utf-8").read()
    chars = sorted(set(text))
    if len(chars) > vocab:
        sys.exit(f"error: {src} has {len(chars)} distinct characters; the "
                 f"model's vocabulary holds {vocab}")
    index = {c: i for i, c in enumerate(chars)}
    ids = array.array("H", (index[c] for c in text))
    if sys.byteorder != "little":
        ids.byteswap()
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        ids.tofile(f)
    import os
    os.replace(tmp, out)
    print(f"{len(ids)} tokens, {len(chars)} distinct characters -> {out}")


if __name__ == "__main__":
    main()
