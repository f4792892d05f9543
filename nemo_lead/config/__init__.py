"""Configuration: loading YAML and `key=value` overrides into the config dataclasses (`loading`), dotted
keys (`dotted`), and the reference of every key read from the dataclasses (`reference`)."""
