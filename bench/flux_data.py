"""What the Flux data loader costs per sample against decoding and preprocessing the images alone.

The baseline reads the drawn ``cc12m-test`` shards with ``tarfile``, decodes each image with PIL
and prepares it with the loader's own ``preprocess_image`` (resize, crop, RGB, [-1, 1] tensor):
the work no loader can avoid. The loader adds grouping, per-sample seeding, T5 and CLIP
tokenization (test tokenizer, 256 and 77 tokens), guidance dropout, collation and position
bookkeeping. Both run over the same samples in alternating rounds after a warm-up; the medians
are compared.

    .venv/bin/python bench/flux_data.py [--repeats N] [--img-size S]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def baseline(folder: Path, *, size: int) -> int:
    """Decode and preprocess every image of the shards in ``folder``; returns the count."""
    from PIL import Image

    from titan.models.flux.image_samples import preprocess_image

    count = 0
    for shard in sorted(folder.glob("*.tar")):
        with tarfile.open(shard) as archive:
            for member in archive:
                if member.name.endswith((".jpg", ".png")):
                    image = Image.open(io.BytesIO(archive.extractfile(member).read()))
                    preprocess_image(image, size=size, rng=random.Random(count))
                    count += 1
    return count


def loader_pass(root: Path, *, size: int) -> int:
    """One finite pass of the Flux loader over ``cc12m-test``; returns the sample count."""
    from titan.models.flux.configs import Encoder
    from titan.models.flux.flux_datasets import FluxDataLoader

    config = FluxDataLoader.Config(
        infinite=False,
        img_size=size,
        classifier_free_guidance_prob=0.447,
        encoder=Encoder(test_mode=True),
    )
    data = config.build(
        dp_world_size=1,
        dp_rank=0,
        local_batch_size=8,
        hf_assets_path=str(REPO / "tests/assets/tokenizer"),
        generated_data_dir=root,
    )
    return sum(len(images) for _, images in data)


def main() -> None:
    """Alternate baseline and loader rounds and print the median times and their ratio."""
    from titan.models.flux.generated_images import ensure_generated_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--img-size", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = ensure_generated_set("cc12m-test", root)
        samples = baseline(folder, size=args.img_size)
        assert loader_pass(root, size=args.img_size) == samples
        times: dict[str, list[float]] = {"baseline": [], "loader": []}
        for _ in range(args.repeats):
            for name, run in (("baseline", lambda: baseline(folder, size=args.img_size)),
                              ("loader", lambda: loader_pass(root, size=args.img_size))):  # fmt: skip
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    base, load = (statistics.median(times[k]) * 1000 / samples for k in ("baseline", "loader"))
    print(f"{samples} samples at {args.img_size}px, {args.repeats} rounds")
    print(f"baseline (decode + preprocess): {base:.2f} ms/sample")
    print(f"Flux loader:                    {load:.2f} ms/sample")
    print(f"ratio loader / baseline:        {load / base:.3f}x")


if __name__ == "__main__":
    main()
