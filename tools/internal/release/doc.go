// Package release keeps pgoutbox installable the way users install it: with
// `go get` from a module proxy, where the replace directives of a
// dependency's go.mod are ignored and go.work does not exist.
//
// # What is published
//
// The published modules are the core (the repository root) and every
// module under publishers/ and adapters/. Each of them requires the core
// at the version in the VERSION file, and no published go.mod has a
// replace directive.
// Development resolves the core from the working tree through the
// committed go.work; the other modules (benchmarks, examples, integration,
// tools) are never published and may keep replace directives.
//
// # What it offers
//
//   - [Repo.Check]: the version rules `make release-check` enforces.
//   - [Repo.Pack] and [Sandbox]: the published modules of the working tree,
//     packed at VERSION into a directory laid out as a module proxy
//     (GOPROXY=file://…), and a go command that resolves them from there
//     with a module cache of its own, so a packed version never lands in
//     the shared module cache where it would shadow the next pack.
//   - [Repo.BuildAlone], [Repo.CheckTidy] and [Repo.Tidy]: each module built,
//     vetted, tidy-checked or tidied alone (GOWORK=off) against that proxy.
//   - [Repo.Bump]: a new version written to VERSION and to every
//     requirement of our modules.
//
// The command tools/cmd/release runs these for the Makefile; the
// package's TestInstall builds a fresh consumer module against the proxy.
package release
