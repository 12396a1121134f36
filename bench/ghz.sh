#!/usr/bin/env bash
# Puts pinlab's load generator beside ghz on one direct path (2000 calls/s,
# 5 s, 5 interleaved rounds) and prints each one's median p50 and the ratio.
# Installs ghz from the Go module proxy into a temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN="$bin" GOFLAGS= go install github.com/bojand/ghz/cmd/ghz@v0.93.0
PINLAB_GHZ="$bin/ghz" go test ./internal/load -run '^$' -bench GeneratorVsGhz -benchtime 1x -timeout 10m
