#!/bin/sh
# `./lab.sh ARGS` is `lab ARGS` with the exit code kept: cargo make reports any failing task
# as 105, so scripts that check the guest command's code call this (or `cargo run -p lab`).
exec cargo run --quiet --manifest-path "$(dirname "$0")/Cargo.toml" --package lab -- "$@"
