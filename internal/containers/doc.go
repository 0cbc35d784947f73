// Package containers keeps OpenAI-style containers alive across responses:
// a container's files live in a store.Store (so any replica can serve
// them), and while this server holds the container's interpreter (a
// sandbox.Session) its variables live on too. It implements
// interceptor.Containers.
//
// The store is the truth for /mnt/data: before each run the interpreter's
// /mnt/data is made to match the container's files (what the API added,
// replaced or deleted reaches even a held interpreter); after the run the
// store takes what the code created, changed or deleted there (source
// "assistant"), and the run's images as container files too, and what it
// cannot keep is removed again, named in one note.
// Interpreters of idle containers count against the sandbox's capacity:
// when a new one is needed and none is free, the least recently used idle
// interpreter is closed (its files stay). With Config.Checkpoints its
// state is checkpointed first, and in the background once it has been idle
// Config.CheckpointAfter, so the next run there — on this server after an
// eviction or a restart, or on another sharing the checkpoint store —
// restores it (checkpoints.go); without a usable checkpoint the next run
// starts a fresh interpreter and the model is told its variables were
// reset.
//
// A container made with a network_policy allowlist (Spec.Network, or the
// Containers API's create) keeps it for life: the store holds its domains
// and its secrets' domains and names (store.NetworkPolicy), the values
// only this Manager's memory (KeepSecrets), so every interpreter the
// container gets is opened with the same policy. An auto container is
// reused only for the same policy. After a restart a container whose
// secrets are gone fails its runs with ErrSecretsLost until a request
// resupplies them.
//
// Files: manager.go (opening and creating containers, files into them),
// container.go (one response's use: runs, the /mnt/data mirror and
// collect), held.go (the interpreters held between responses, their LRU
// and eviction), checkpoints.go (their state beyond this process),
// placement.go (one holder among replicas, forwarded runs), policy.go
// (network policies and their secrets), skills.go (a container's skills,
// mounted in each interpreter), types.go (what the interceptor sees).
package containers
