package signature

// WaitRefresh waits for a background refresh Current started (tests).
func (t *TUFRoot) WaitRefresh() { t.wg.Wait() }
