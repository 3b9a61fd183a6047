"""Validate params.yaml, and print every key with its value, the defaults of the keys it leaves out included.

python -m compilebench.config [params.yaml]
"""

import sys

from omegaconf import OmegaConf

from compilebench.config import load_config


def main() -> None:
    config = load_config(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
    print(OmegaConf.to_yaml(OmegaConf.structured(config)))


if __name__ == "__main__":
    main()
