package main

import "context"

func runSuite(ctx context.Context, o Options) error { return nil }
