"""Which examples two splits of a dataset share: what an evaluation must not count.

`shared_examples(source, train_split, eval_split)` -> (shared, of, unit): the
examples of `eval_split` that are also in `train_split`, each counted once.
`simclr_tf.run.preflight.check_eval_overlap` refuses a run whose evaluation would count
examples that trained its weights, fill its kNN bank or fit its probe;
`check_disjoint` is the same refusal for the evaluators (`knn.KnnEval`,
`transfer.evaluate_protocols` and its evaluators) built outside a run.
"""
import collections
import hashlib
import os

from absl import logging

# Image folders: byte-identical copies are looked for among the files of equal size
# when reading them costs at most this many bytes (else only the same files count).
COPY_CHECK_MAX_BYTES = 1 << 30


def shared_examples(source, train_split, eval_split, train_source=None):
    """(examples of `eval_split` that are also in `train_split`, examples of
    `eval_split`, their unit) counted once each. `train_split` is of `train_source`
    when given (another image folder: the same files under two folder names, such as
    a folder and its train/ subfolder), else of `source`.

    What "the same example" is: for an image folder (a source whose rows are file
    paths), the same file, reached by any path, link or hard link, or a byte-identical
    copy (looked for among files of equal size, up to `COPY_CHECK_MAX_BYTES` of
    reading); for every other source, the same position of the same base split
    (`DatasetSource.split_ranges`: 'train[:60%]' and 'train[50%:]' share 10%; base
    splits are disjoint).

    Raises:
        ValueError: a split does not resolve.
    """
    paths = (_split_paths(train_source or source, train_split),
             _split_paths(source, eval_split))
    if paths[0] is not None and paths[1] is not None:
        shared, total = _shared_files(*paths)
        return shared, total, "image files"
    if train_source is not None:
        return 0, 0, "examples"  # two datasets without files share no example
    train = _merged(source.split_ranges(train_split))
    test = _merged(source.split_ranges(eval_split))
    shared = sum(max(0, min(stop, other_stop) - max(start, other_start))
                 for base, spans in test.items() for start, stop in spans
                 for other_start, other_stop in train.get(base, ()))
    total = sum(stop - start for spans in test.values() for start, stop in spans)
    return shared, total, "examples"


def _merged(ranges):
    """{base split: sorted disjoint [start, stop) spans} of split ranges."""
    spans = collections.defaultdict(list)
    for base, start, stop in sorted(ranges):
        if stop <= start:
            continue
        if spans[base] and start <= spans[base][-1][1]:
            spans[base][-1][1] = max(spans[base][-1][1], stop)
        else:
            spans[base].append([start, stop])
    return spans


def _split_paths(source, split):
    """The file paths of `split` of an image folder (str), or None for a source
    without files."""
    select = getattr(source, "_select", None)
    if select is None:
        return None
    columns = select(split)
    if "path" not in columns:
        return None
    return [os.fsdecode(path) for path in columns["path"]]


def _file_identity(path):
    """(size, identity) of a file: its device and inode, the same through any
    path or link; the real path where it cannot be read."""
    try:
        stat = os.stat(path)
        return stat.st_size, (stat.st_dev, stat.st_ino)
    except OSError:
        return None, os.path.realpath(path)


def _content_digest(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _shared_files(train_paths, eval_paths):
    """(distinct files of `eval_paths` also in `train_paths`, distinct files of
    `eval_paths`): the same file, or a byte-identical copy (`shared_examples`)."""
    train = {path: _file_identity(path) for path in set(train_paths)}
    test = {path: _file_identity(path) for path in set(eval_paths)}
    train_ids = {identity for _, identity in train.values()}
    test_ids = {identity: size for size, identity in test.values()}
    shared = {identity for identity in test_ids if identity in train_ids}
    # Copies: a file of the eval split whose bytes equal a training file's.
    train_by_size = collections.defaultdict(set)
    for size, identity in train.values():
        if size is not None and identity not in shared:
            train_by_size[size].add(identity)
    candidates = {identity: size for identity, size in test_ids.items()
                  if identity not in shared and size in train_by_size}
    if candidates:
        path_of = {identity: path for path, (_, identity) in
                   list(train.items()) + list(test.items())}
        sizes = set(candidates.values())
        to_read = set(candidates) | {i for size in sizes for i in train_by_size[size]}
        cost = sum(candidates.values()) + sum(size * len(train_by_size[size])
                                              for size in sizes)
        if cost > COPY_CHECK_MAX_BYTES:
            logging.warning("Not looking for byte-identical copies between the splits: "
                            "%d files of equal sizes (%.1f GB to read); only the same "
                            "files are counted as shared.", len(to_read), cost / 1e9)
        else:
            try:
                digests = {i: _content_digest(path_of[i]) for i in to_read}
            except OSError:
                digests = {}
            train_digests = {digests[i] for size in sizes for i in train_by_size[size]
                             if i in digests}
            shared |= {i for i in candidates if digests.get(i) in train_digests}
    return len(shared), len(test_ids)


def check_disjoint(source, train_split, eval_split, *, what, allow=False):
    """Raises ValueError when `eval_split` shares examples with `train_split` (the
    split of `what`: a kNN bank, a probe's training split), naming both and the
    count, unless `allow`; returns the count. The evaluators' own check, for code
    that builds them without `run.py` (whose preflight names the flags instead)."""
    shared, total, unit = shared_examples(source, train_split, eval_split)
    if shared and not allow:
        raise ValueError(
            f"{eval_split!r} shares {shared} of its {total} {unit} with {train_split!r} "
            f"({what}): an accuracy measured there counts the examples {what} holds, "
            "which inflates it. Use splits that share no example (e.g. 'train[:90%]' "
            "and 'train[90%:]'), or pass allow_overlap=True to measure it anyway.")
    return shared
