"""wneurons: Wasserstein neurons and their negative pre-activations (Snakemake workflow + library)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wneurons")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0+unknown"
