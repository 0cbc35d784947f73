// Package background runs the Responses API's background mode
// (`"background": true`): the whole agentic loop — the first inference,
// each run of code, each follow-up — driven by this server, detached from
// the client's connection, and its state kept where every replica sees it.
//
// The filter hands a background exchange to Runner.Start, which admits it
// (responses.max_background per credential and per server:
// store.Background.Begin), stores the response record with status
// "queued" (so GET /v1/responses/{id} answers at once, on any replica) and
// starts the run. The run:
//
//   - renews its liveness every TTL/3, so that a replica killed mid-run
//     leaves a run that lapses: readers then see it failed, never
//     in_progress forever (api marks it so when it is read);
//   - watches for a cancel request (POST /v1/responses/{id}/cancel on any
//     replica: store.Background.Cancel; on this replica Cancel also stops
//     it at once) and cancels its context: a running cell is interrupted
//     as when a client leaves, the container and its files stay;
//   - with "stream": true, keeps every event in the response's event log,
//     numbered from 0 as the client's stream numbers them, so that
//     GET /v1/responses/{id}?stream=true&starting_after=N resumes it from
//     any replica; the first two are response.created and response.queued
//     with the queued object, as OpenAI's;
//   - ends by storing the response as it ended: completed or incomplete
//     (the interceptor stores it, as for any response, through Settled:
//     its write is a compare-and-set on the run's end, so a cancel that
//     settled the run first is never overwritten, not even for a moment),
//     cancelled (the output so far), or failed with the reason.
//
// Close stops the runner at SIGTERM: runs still going after the drain
// timeout are cancelled and stored failed ("the server stopped"), so none
// is left in_progress.
package background
