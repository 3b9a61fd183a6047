"""Validate params.yaml, and print every key with its value, the defaults of the keys it leaves out included.

python -m compilebench.config [params.yaml]
"""

import argparse
import sys

from omegaconf import OmegaConf

from compilebench.config import ConfigError, load_config


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m compilebench.config", description=__doc__.splitlines()[0])
    parser.add_argument("params", nargs="?", default="params.yaml", help="the params file (params.yaml)")
    try:
        config = load_config(parser.parse_args().params)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    print(OmegaConf.to_yaml(OmegaConf.structured(config)))


if __name__ == "__main__":
    main()
