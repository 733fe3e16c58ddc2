package collective

import "context"

// Barrier returns once every member reached it. The op header exchange is all-to-all, so it
// is the barrier.
func (g *Group) Barrier(ctx context.Context) error {
	if p := g.path(); p != nil {
		return p.barrier(ctx)
	}
	_, err := g.begin(ctx, header{kind: kindBarrier})
	return err
}
