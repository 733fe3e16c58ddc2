package master

// queueLocalGarbage keeps files on clients' local disks that no object references any more
// until their client's next FetchOffloadTasks, which hands them over for deletion. The queue is
// the serving master's, outside the state machine: after a failover the new leader does not
// know it, and the files stay until their client closes (it removes its whole offload
// directory then) — disk space, never wrong data, since no replica names them.
func (s *Server) queueLocalGarbage(files []LocalFile) {
	if len(files) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.localGarbage == nil {
		s.localGarbage = map[string][]string{}
	}
	for _, f := range files {
		s.localGarbage[f.Client] = append(s.localGarbage[f.Client], f.Path)
	}
	close(s.wake)
	s.wake = make(chan struct{})
}

// takeLocalGarbage returns and forgets client's queued files (s.mu held). Queues of clients
// the state no longer knows are dropped with them.
func (s *Server) takeLocalGarbage(client string) []string {
	out := s.localGarbage[client]
	delete(s.localGarbage, client)
	for c := range s.localGarbage {
		if len(s.state.ClientSegments(c)) == 0 {
			delete(s.localGarbage, c)
		}
	}
	return out
}
