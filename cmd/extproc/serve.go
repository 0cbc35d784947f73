package main

import (
	"context"
	"errors"
)

// runServe is implemented with the filter (issue: ext_proc server).
func runServe(ctx context.Context, args []string) error { return errors.New("serve: not implemented yet") }

// runDev is implemented with the filter (issue: ext_proc server).
func runDev(ctx context.Context, args []string) error { return errors.New("dev: not implemented yet") }
