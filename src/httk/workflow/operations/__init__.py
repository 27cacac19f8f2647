"""What operators and library callers run: submission, inspection, fsck, gc, remotes, transfer."""
