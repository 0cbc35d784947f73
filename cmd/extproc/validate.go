package main

import (
	"context"
	"errors"
)

// runValidateConfig is implemented with the config package.
func runValidateConfig(ctx context.Context, args []string) error {
	return errors.New("validate-config: not implemented yet")
}
