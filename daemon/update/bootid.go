package update

import (
	"fmt"
	"os"
	"strings"
)

// KernelBootIDPath is where the kernel publishes its boot ID.
const KernelBootIDPath = "/proc/sys/kernel/random/boot_id"

// KernelBootID reads the kernel's boot ID, which changes at every boot.
func KernelBootID() (string, error) { return FileBootID(KernelBootIDPath)() }

// FileBootID reads the boot ID from path (a simulated host's stand-in for
// the kernel's file).
func FileBootID(path string) BootIDFunc {
	return func() (string, error) {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read boot ID: %w", err)
		}
		return strings.TrimSpace(string(data)), nil
	}
}
