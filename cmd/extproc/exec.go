package main

import (
	"context"
	"errors"
)

func runExec(ctx context.Context, args []string) error { return errors.New("exec: not implemented yet") }

func runWorker(args []string) int { return 1 }
