package sandbox

// FileOverheadBytes is, at most, what one file costs a session's scratch
// space beyond its bytes: a page of a gVisor tmpfs (which counts whole
// pages), well above memfs's inode charge.
const FileOverheadBytes = 4 << 10

// DataCapacity is how many bytes of files, in up to files files, a fresh
// session with scratchBytes of scratch space is sure to hold in /mnt/data.
// A container may hold no more than that: its files are copied whole into
// every interpreter it gets.
func DataCapacity(scratchBytes int64, files int) int64 {
	return max(scratchBytes-int64(files)*FileOverheadBytes, 0)
}
