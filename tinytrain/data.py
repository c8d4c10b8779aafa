"""Datasets for fine-tuning and evaluation, and the model-derived input pipeline (docs/design.md §5a DATA,
docs/guide/data.md).

A dataset is uint8 images (N,H,W,C) or features (N, ...) with integer labels, float targets or neither, read from
- an ``.npz`` with ``x`` and optionally ``y`` and ``anomaly``:
  ``x`` (N,H,W[,C]) uint8 images, or features of the model's input shape without its batch dimension: int8
  (already quantized, taken as is) or float32 / float64 (quantized with the input's scale and zero point; a value
  that rounds outside int8 is refused, not clipped); ``y`` (N,) integer class labels, or float targets
  (N, ...) of the model's output shape (``--loss mse``), or absent (reconstruction: the target is the input);
  ``anomaly`` (N,) 0 = normal / 1 = anomalous, read by ``eval`` for the ROC AUC of an autoencoder,
- a folder with one sub-folder of images (PNG/JPEG/BMP) per class (labels in sorted folder order),
- ``lfw`` — scikit-image's ``lfw_subset`` (100 faces = 1, 100 non-faces = 0), the built-in VWW-style
  demo set that needs nothing from outside the installed packages;
- ``fashion-mnist[:train|:test][:N]`` — Fashion-MNIST (28x28 grayscale, 10 classes; 60,000 training and
  10,000 test images) from the Debian package ``dataset-fashion-mnist`` (IDX files in ``FASHION_MNIST_DIR``),
  read in place; ``:N`` keeps a stratified subset of N images (``stratified_subset``, seed 0: the same rows
  on every machine).

A folder's class names (its sub-folders, sorted) or an .npz's ``classes`` array (strings, one per label) travel
with the data and are stated (a ``Notice``); the images of a folder have one size (mixed sizes are refused), and each class folder holds an image.
``model_inputs`` resizes (bilinear; stated), converts channels and quantizes images to the model's int8 input, and
checks and quantizes features (``features_for_model``). A pixel becomes the model's real input by the input mapping
(tinytrain/input_mapping.py: given, carried by the model, or read off its input quantization), then
q = clamp(round(real / s) + zp), which is pixel - 128 for pixel / 255 with the usual s = 1/255, zp = -128 and for
TF1 uint8 models fed raw pixels.
"""

from __future__ import annotations

import difflib
import gzip
import warnings
import hashlib
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tinytrain.errors import Notice, UsageError
from tinytrain.input_mapping import for_model
from tinytrain.ir import Graph
from tinytrain.splits import stratified_subset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")
AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg")
FEATURES_HINT = ("tinytrain trains on features of audio: compute them (tinytrain.audio.mfcc, quantize_features) and "
                 "save an .npz (docs/guide/data.md)")
BUILT_IN = ("lfw", "fashion-mnist")  # the data sets named, not read from a path
MAX_LABEL = 65535  # an .npz label beyond this is not a class index
LUMA = np.array([0.299, 0.587, 0.114])
FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                       "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
FASHION_MNIST_CLASSES = ("t-shirt/top", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker",
                         "bag", "ankle boot")


@dataclass(frozen=True)
class Dataset:
    x: np.ndarray = field(repr=False)  # (N,H,W,C) uint8 images, or (N, ...) int8 / float32 features
    y: np.ndarray | None = field(repr=False)  # (N,) int64 labels, (N, ...) float32 targets, or None
    classes: tuple[str, ...]
    source: str
    anomaly: np.ndarray | None = field(default=None, repr=False)  # (N,) int64: 0 normal, 1 anomalous

    def __len__(self) -> int:
        return len(self.x)

    @property
    def labelled(self) -> bool:
        """y holds class labels (not float targets, not absent)."""
        return self.y is not None and np.issubdtype(self.y.dtype, np.integer)

    def subset(self, idx: np.ndarray) -> Dataset:
        def pick(a):
            return None if a is None else a[idx]
        return Dataset(self.x[idx], pick(self.y), self.classes, self.source, pick(self.anomaly))


def load_dataset(spec: str | Path) -> Dataset:
    """Read a dataset from an .npz, a class-folder tree, or a built-in name (``lfw``, ``fashion-mnist...``); its
    class names, where it has them, are stated (a Notice)."""
    ds = _load(spec)
    _state_classes(ds)
    return ds


def _load(spec: str | Path) -> Dataset:
    if str(spec) == "lfw":
        return _load_lfw()
    if str(spec) == "fashion-mnist" or str(spec).startswith("fashion-mnist:"):
        return load_fashion_mnist(str(spec))
    path = Path(spec)
    if path.is_dir():
        return _load_folder(path)
    if path.is_file():
        if path.suffix.lower() in IMAGE_SUFFIXES:
            raise UsageError(f"{path}: one image, not a dataset; give the folder that holds one sub-folder of "
                             f"images per class (here perhaps {path.parent.parent})")
        if path.suffix.lower() in AUDIO_SUFFIXES:
            raise UsageError(f"{path}: an audio file, not a dataset; {FEATURES_HINT}")
        return _load_npz(path)
    close = difflib.get_close_matches(str(spec).split(":")[0], BUILT_IN, n=1, cutoff=0.6)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise UsageError(f"dataset {spec}: no such file or folder; give an .npz, a folder of class folders, 'lfw' or "
                     f"'fashion-mnist[:test][:N]'{hint}")


def _load_npz(path: Path) -> Dataset:
    with open(path, "rb") as f:
        magic = f.read(6)
    if not magic.startswith((b"PK", b"\x93NUMPY")):  # numpy would call a text or CSV file "pickled data"
        raise UsageError(f"{path}: cannot read as .npz: not a numpy file; DATA is an .npz of arrays x, y "
                         "(numpy.savez(FILE.npz, x=..., y=...)), a folder of class folders, 'lfw' or 'fashion-mnist'")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise UsageError(f"{path}: a plain .npy array is not a dataset; save the features (and labels) "
                             "together with numpy.savez(FILE.npz, x=features, y=labels)")
        with loaded as f:
            if "x" not in f.files:
                raise UsageError(f"{path}: an .npz dataset needs arrays 'x' (N,H,W,C uint8 images or (N, ...) "
                                 f"int8 / float32 features) and 'y' (labels, targets; optional), has {f.files}")
            x = f["x"]
            y = f["y"] if "y" in f.files else None
            anomaly = f["anomaly"] if "anomaly" in f.files else None
            classes = f["classes"] if "classes" in f.files else None
    except (OSError, ValueError, EOFError, NotImplementedError, zipfile.BadZipFile, zlib.error) as e:  # damaged
        raise UsageError(f"{path}: cannot read as .npz ({e})") from None
    return dataset_from_arrays(x, y, anomaly, str(path), classes)


def dataset_from_arrays(x, y=None, anomaly=None, source: str = "the data", classes=None) -> Dataset:
    """A Dataset of arrays as an .npz holds them (``x``, ``y`` or None, ``anomaly`` or None, ``classes``: a name per
    label or None), checked."""
    x = _checked_x(source, np.asarray(x))
    y = None if y is None else _checked_y(source, np.asarray(y), len(x))
    if anomaly is not None:
        anomaly = _checked_anomaly(source, np.asarray(anomaly), len(x))
    if x.dtype == np.uint8 and x.ndim == 3:
        x = x[..., None]
    n_classes = int(y.max()) + 1 if y is not None and y.dtype == np.int64 and len(y) else 0
    names = tuple(str(i) for i in range(n_classes)) if classes is None else _checked_classes(source, classes, n_classes)
    return Dataset(x, y, names, source, anomaly)


def _checked_classes(source: str, classes, n_classes: int) -> tuple[str, ...]:
    classes = np.asarray(classes)
    if classes.ndim != 1 or classes.dtype.kind not in "US" or len(classes) < n_classes:
        raise UsageError(f"{source}: 'classes' must be (K,) strings, a name for each label 0..{n_classes - 1}, got "
                         f"{classes.dtype}{classes.shape}")
    names = tuple(str(c.decode() if isinstance(c, bytes) else c) for c in classes)
    if len(set(names)) != len(names):
        raise UsageError(f"{source}: 'classes' names a class twice")
    return names


def _state_classes(ds: Dataset) -> None:
    """A Notice of the class names, label by label, where the data name them (not labels 0..K-1 alone)."""
    if ds.classes and ds.classes != tuple(str(i) for i in range(len(ds.classes))):
        shown = ", ".join(f"{k} {name}" for k, name in enumerate(ds.classes))
        warnings.warn(Notice(f"{ds.source}: {len(ds.classes)} classes: {shown}"))


def _checked_x(path: str, x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint8 and x.ndim in (3, 4):
        return x
    if x.dtype == np.int8 and x.ndim >= 2:
        return x
    if x.dtype in (np.float32, np.float64) and x.ndim >= 2:
        if not np.all(np.isfinite(x)):
            raise UsageError(f"{path}: x holds {int((~np.isfinite(x)).sum())} NaN or infinite values")
        return x.astype(np.float32)
    raise UsageError(f"{path}: x must be uint8 images (N,H,W[,C]) or int8 / float32 features (N, ...), "
                     f"got {x.dtype}{x.shape}")


def _checked_y(path: str, y: np.ndarray | None, n: int) -> np.ndarray | None:
    if y is None:
        return None
    if len(y) != n:
        raise UsageError(f"{path}: x has {n} samples but y has {len(y)}")
    if np.issubdtype(y.dtype, np.integer):
        if y.ndim != 1:
            raise UsageError(f"{path}: integer labels y must be (N,), got {y.shape}; float targets must be float32")
        if len(y) and (y.min() < 0 or y.max() > MAX_LABEL):
            none = ("; -1 marks an unlabelled sample of a field stream (tinytrain field --stream), which train / "
                    "eval cannot use: keep the labelled ones, x[y >= 0]") if y.min() == -1 else ""
            raise UsageError(f"{path}: labels y must be class indices 0..{MAX_LABEL}, got {y.min()}..{y.max()}{none}")
        return y.astype(np.int64)
    if y.dtype in (np.float32, np.float64):
        if not np.all(np.isfinite(y)):
            raise UsageError(f"{path}: the targets y hold NaN or infinite values")
        return y.astype(np.float32)
    raise UsageError(f"{path}: y must be integer class labels (N,) or float targets (N, ...), got {y.dtype}")


def _checked_anomaly(path: str, a: np.ndarray, n: int) -> np.ndarray:
    if a.ndim != 1 or len(a) != n or not (np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_) \
            or not np.isin(a, (0, 1)).all():
        raise UsageError(f"{path}: 'anomaly' must be (N,) = ({n},) of 0 (normal) and 1 (anomalous), "
                         f"got {a.dtype}{a.shape}")
    return a.astype(np.int64)


_FOLDER_CACHE: dict[str, Dataset] = {}


def _load_folder(path: Path) -> Dataset:
    """Decode a class-folder tree once per process (keyed by the files' names, sizes and times)."""
    from PIL import Image

    classes = sorted(p.name for p in path.iterdir() if p.is_dir())
    files = [(c, f) for c in classes for f in sorted((path / c).iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not files:
        raise UsageError(_no_images(path, classes))
    empty = [c for c in classes if not any(fc == c for fc, _ in files)]
    if empty:
        raise UsageError(f"{path}: class folder{'s' if len(empty) > 1 else ''} {', '.join(empty)} hold{'' if len(empty) > 1 else 's'} "
                         f"no PNG/JPEG/BMP image; add images or remove the folder (each sub-folder is a class)")
    key = hashlib.sha256("".join(f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for _, f in files).encode()).hexdigest()
    if key in _FOLDER_CACHE:
        return _FOLDER_CACHE[key]
    images, labels = [], []
    size = None
    for c, f in files:
        try:
            with Image.open(f) as im:
                rgb = np.asarray(im.convert("RGB"), np.uint8)
        except OSError as e:
            raise UsageError(f"{f}: cannot decode image ({e})") from None
        if size is None:
            size, first = rgb.shape[:2], f
        if rgb.shape[:2] != size:
            raise UsageError(f"{f} is {rgb.shape[1]}x{rgb.shape[0]}, {first} {size[1]}x{size[0]}: give all the "
                             "images one size (resize or crop them as your camera will see them)")
        images.append(rgb)
        labels.append(classes.index(c))
    ds = Dataset(np.stack(images), np.asarray(labels, np.int64), tuple(classes), str(path))
    _FOLDER_CACHE[key] = ds
    return ds


def _no_images(path: Path, classes: list[str]) -> str:
    """What a folder without class folders of images holds instead, and what to give."""
    found = [f for f in path.iterdir() if f.is_file()] + [f for c in classes for f in (path / c).iterdir()]
    suffixes = {f.suffix.lower() for f in found}
    if suffixes & set(AUDIO_SUFFIXES):
        return f"{path}: holds audio files, not images; {FEATURES_HINT}"
    if not classes and suffixes & set(IMAGE_SUFFIXES):
        return (f"{path}: holds images but no class folders; DATA is a folder with one sub-folder of images per "
                f"class (here perhaps {path.parent})")
    return f"{path}: no images found; expected one sub-folder of PNG/JPEG/BMP images per class"


def _load_lfw() -> Dataset:
    from skimage.data import lfw_subset

    faces = lfw_subset()  # (200, 25, 25) float in [0, 1]: 100 faces then 100 non-faces
    x = np.round(faces * 255).astype(np.uint8)[..., None]
    y = np.r_[np.ones(100, np.int64), np.zeros(100, np.int64)]
    return Dataset(x, y, ("no_face", "face"), "lfw")


def load_fashion_mnist(spec: str, root: Path = FASHION_MNIST_DIR) -> Dataset:
    """``fashion-mnist[:train|:test][:N]`` from the IDX files of the Debian package (see the module docstring)."""
    parts = spec.split(":")[1:]
    split = parts.pop(0) if parts and parts[0] in FASHION_MNIST_FILES else "train"
    n = None
    if len(parts) == 1 and parts[0].isdigit() and int(parts[0]) > 0:
        n = int(parts[0])
    elif parts:
        raise UsageError(f"dataset {spec}: expected fashion-mnist[:train|:test][:N] (N a positive subset size)")
    images, labels = (root / f for f in FASHION_MNIST_FILES[split])
    if not images.is_file() or not labels.is_file():
        raise UsageError(f"dataset {spec}: {images} not found; install the Debian package dataset-fashion-mnist "
                         "(apt-get install dataset-fashion-mnist)")
    x, y = _read_idx(images), _read_idx(labels)
    if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
        raise UsageError(f"dataset {spec}: {images.name} {x.shape} and {labels.name} {y.shape} do not match")
    ds = Dataset(x[..., None], y.astype(np.int64), FASHION_MNIST_CLASSES, spec)
    if n is not None:
        if n > len(ds):
            raise UsageError(f"dataset {spec}: {n} images asked, the {split} split has {len(ds)}")
        ds = ds.subset(stratified_subset(ds.y, n))
    return ds


def _read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzip-compressed): magic 0x0000 | type 0x08 (uint8) | ndim, big-endian int32 dims, data."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise UsageError(f"{path}: cannot read ({e})") from None
    if len(raw) < 4 or raw[:3] != b"\0\0\x08":
        raise UsageError(f"{path}: not an IDX file of uint8 values")
    ndim = raw[3]
    dims = tuple(int(d) for d in np.frombuffer(raw, ">i4", ndim, 4))
    if len(raw) != 4 + 4 * ndim + int(np.prod(dims)):
        raise UsageError(f"{path}: truncated IDX file (dimensions {dims})")
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _resize(img: np.ndarray, h: int, w: int) -> np.ndarray:
    from PIL import Image

    if img.shape[:2] == (h, w):
        return img
    mode = "L" if img.shape[2] == 1 else "RGB"
    im = Image.fromarray(img[..., 0] if mode == "L" else img, mode)
    out = np.asarray(im.resize((w, h), Image.BILINEAR), np.uint8)
    return out[..., None] if out.ndim == 2 else out


def images_for_model(graph: Graph, x: np.ndarray) -> np.ndarray:
    """uint8 images (N,H,W,C) -> uint8 images of the model's size and channel count."""
    return images_for_shape(x, graph.tensors[graph.inputs[0]].shape[1:])


def images_for_shape(x: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """uint8 images (N,H,W,C) -> uint8 images of ``shape`` (H, W, C)."""
    h, w, c = shape
    if x.shape[3] == 3 and c == 1:
        x = np.round(x.astype(np.float64) @ LUMA).astype(np.uint8)[..., None]
    elif x.shape[3] == 1 and c == 3:
        x = np.repeat(x, 3, axis=3)
    elif x.shape[3] != c:
        raise UsageError(f"images have {x.shape[3]} channels; the model takes {c}")
    if x.shape[1:3] != (h, w):
        x = np.stack([_resize(img, h, w) for img in x])
    return x


def quantize_images(graph: Graph, x: np.ndarray, mapping=None) -> np.ndarray:
    """uint8 images of the model's shape -> the model's internal int8 input, through the input mapping (the
    model's, ``input_mapping.for_model``, unless given)."""
    q = graph.tensors[graph.inputs[0]].quant
    real = (mapping or for_model(graph)).real(x)
    return np.clip(np.round(real / np.float32(q.s)) + q.zp, -128, 127).astype(np.int8)


def model_inputs(graph: Graph, x: np.ndarray, chunk: int = 1000) -> np.ndarray:
    """uint8 images (N,H,W,C) of any size, or features (N, ...) of the model's input shape -> the model's int8
    input batch.

    Images are converted ``chunk`` at a time: the float32 intermediates of a whole set (Fashion-MNIST's 60,000
    images at 128x128x3: 12 GB each) would not fit in memory; the int8 result is 1 byte per value.
    """
    shape = graph.tensors[graph.inputs[0]].shape
    if x.dtype != np.uint8 or len(shape) != 4:
        return features_for_model(graph, x)
    _, h, w, c = shape
    mapping = for_model(graph)
    state_conversion(x.shape[1:], (h, w, c))
    out = np.empty((len(x), h, w, c), np.int8)
    for i in range(0, len(x), chunk):
        out[i: i + chunk] = quantize_images(graph, images_for_model(graph, x[i: i + chunk]), mapping)
    return out


def state_conversion(have: tuple[int, ...], want: tuple[int, int, int]) -> None:
    """A Notice of what ``images_for_model`` does to images of shape ``have`` (H, W, C) for the model's ``want``."""
    (h0, w0, c0), (h, w, c) = have, want
    done = []
    if (h0, w0) != (h, w):
        keeps = "aspect ratio kept" if h0 * w == w0 * h else "aspect ratio not kept"
        done.append(f"resized from {w0}x{h0} to {w}x{h} (bilinear, {keeps})")
    if c0 != c:
        done.append("RGB to luma (0.299 R + 0.587 G + 0.114 B)" if c == 1 else f"{c0} channel replicated to {c}")
    if done:
        warnings.warn(Notice(f"images {' and '.join(done)} for the model's {w}x{h}x{c} input"))


def features_for_model(graph: Graph, x: np.ndarray) -> np.ndarray:
    """Features (N, ...) of the model's input shape -> its int8 input: int8 taken as is, float32 quantized,
    q = round(x / s) + zp (round half to even, as the images); a value whose q leaves [-128, 127] is refused."""
    t = graph.tensors[graph.inputs[0]]
    if tuple(x.shape[1:]) != tuple(t.shape[1:]):
        images = "; images are uint8 (N,H,W[,C]), of any size" if len(t.shape) == 4 and x.dtype != np.uint8 else ""
        raise UsageError(f"the features x are {x.dtype}{tuple(x.shape)}, the model's input takes (N, "
                         f"{', '.join(map(str, t.shape[1:]))}) per sample{images}")
    if x.dtype == np.int8:
        return x
    if x.dtype != np.float32:
        raise UsageError(f"features must be int8 (quantized) or float32, got {x.dtype}"
                         + ("; uint8 means images (N,H,W,C), for a model taking images" if x.dtype == np.uint8 else ""))
    q = np.round(x / np.float32(t.quant.s)) + t.quant.zp
    out = (q < -128) | (q > 127)
    if out.any():
        lo, hi = ((v - t.quant.zp) * t.quant.s for v in (-128, 127))
        raise UsageError(f"{int(out.sum())} of {x.size} feature values lie outside the model input's range "
                                f"[{lo:.6g}, {hi:.6g}] (scale {t.quant.s:.6g}, zero point {t.quant.zp}); clip or "
                                "rescale them to that range first")
    return q.astype(np.int8)
