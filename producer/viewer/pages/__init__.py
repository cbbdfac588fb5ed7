"""The viewer's pages, one module each; ``producer.viewer.router`` maps paths to them."""
