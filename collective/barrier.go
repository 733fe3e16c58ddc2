package collective

import "context"

// Barrier returns once every member reached it. The op header exchange is all-to-all, so it
// is the barrier.
func (g *Group) Barrier(ctx context.Context) error {
	_, err := g.begin(ctx, header{kind: kindBarrier})
	return err
}
