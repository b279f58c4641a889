// Command release keeps the published modules installable the way users
// install them (see docs/releasing.md). Run from anywhere in the repository:
//
//	go run ./tools/cmd/release check   # make release-check
//	go run ./tools/cmd/release build   # in make build
//	go run ./tools/cmd/release tidy    # in make lint: fails if a go.mod or go.sum is not tidy
//	go run ./tools/cmd/release tidy -w # make tidy: writes the tidied files
//	go run ./tools/cmd/release pack DIR
//	go run ./tools/cmd/release bump vX.Y.Z
//	go run ./tools/cmd/release work    # make work/replace
//
// check enforces the version rules: VERSION is a semantic version, every
// publisher requires the core at it, no published go.mod has a replace
// directive, CHANGELOG.md has a section for it or an [Unreleased] one,
// go.work uses every module and all declare one go version. build packs
// the published modules of the working tree at VERSION into a local
// module proxy and builds and vets each alone against it (GOWORK=off).
// tidy runs go mod tidy on every module against the same proxy. pack
// writes that proxy into DIR, for trying an install by hand. bump writes a
// new version to VERSION and to every requirement of our modules. work
// prints the replace block a go.work outside the repository needs to use
// this checkout before VERSION is published (docs/testing.md). The exit
// status is 1 when a check fails, 2 on bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/pgoutbox/pgoutbox/tools/internal/release"
)

const usage = `usage: release check | build | tidy [-w] | pack DIR | bump vX.Y.Z | work
run inside the repository (see docs/releasing.md)`

var errUsage = errors.New(usage)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	switch {
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	root, err := release.FindRoot(".")
	if err != nil {
		return err
	}
	repo, err := release.Load(root)
	if err != nil {
		return err
	}
	switch args[0] {
	case "check":
		return repo.Check()
	case "build":
		return inSandbox(ctx, repo, repo.BuildAlone)
	case "tidy":
		return tidy(ctx, repo, args[1:])
	case "pack":
		if len(args) != 2 {
			return errUsage
		}
		return repo.Pack(args[1])
	case "bump":
		if len(args) != 2 {
			return errUsage
		}
		return repo.Bump(args[1])
	case "work":
		if len(args) != 1 {
			return errUsage
		}
		_, err := fmt.Print(repo.WorkReplaces())
		return err
	}
	return errUsage
}

func tidy(ctx context.Context, repo *release.Repo, args []string) error {
	flags := flag.NewFlagSet("tidy", flag.ContinueOnError)
	write := flags.Bool("w", false, "write the tidied go.mod and go.sum back")
	if err := flags.Parse(args); err != nil || flags.NArg() != 0 {
		return errUsage
	}
	if *write {
		return inSandbox(ctx, repo, repo.Tidy)
	}
	return inSandbox(ctx, repo, repo.CheckTidy)
}

// inSandbox runs f in a sandbox living in a temporary directory, removed
// afterwards.
func inSandbox(ctx context.Context, repo *release.Repo, f func(context.Context, *release.Sandbox) error) (err error) {
	dir, err := os.MkdirTemp("", "pgoutbox-release")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	s, err := repo.NewSandbox(ctx, dir)
	if err != nil {
		return err
	}
	return f(ctx, s)
}
